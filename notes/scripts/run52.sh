# run 52 (session n, when starts were scarce): the INT8 kernel's integer row max A/B in brief
# (int8_imax_ab.py --quick), then the whole GPU suite on this tree (main + the quantizer cuts +
# the integer row max) with the time left. Carry .whl and build/lab (int8_base_ptx.json).
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
T0=$SECONDS
PYTHONPATH=$PYTHONPATH:notes/scripts timeout 100 python3 notes/scripts/int8_imax_ab.py --quick > $OUT/int8_imax_ab.txt 2>&1
tail -3 $OUT/int8_imax_ab.txt
echo "imax done ($((SECONDS - T0)) s)"
SUITE_LIMIT=$((585 - (SECONDS - T0))) bash notes/scripts/gpu_suite.sh all | tail -12
echo "suite done ($((SECONDS - T0)) s)"
