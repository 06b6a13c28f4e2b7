# run 54 (for the session after n; ~4 min on one GPU): the INT8 kernel at d128 in the long layout
# (int8_long_ab.py) and Nsight Compute on the INT8 / E4M3 / fast kernels at Mistral-7B 16K
# (int8_profile.sh); with notes/ab/int8_conversion/session_n/grid_variants.diff applied on the
# device's copy (lab switches, default off: the package's PTX unchanged), so the A/B also times the
# grid fold, serial and long. Carry .whl.
git apply notes/ab/int8_conversion/session_n/grid_variants.diff || exit 1
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
T0=$SECONDS
PYTHONPATH=$PYTHONPATH:notes/scripts timeout 150 python3 notes/scripts/int8_long_ab.py > $OUT/int8_long_ab.txt 2>&1
tail -4 $OUT/int8_long_ab.txt
echo "long done ($((SECONDS - T0)) s)"
bash notes/scripts/int8_profile.sh
echo "profile done ($((SECONDS - T0)) s)"
