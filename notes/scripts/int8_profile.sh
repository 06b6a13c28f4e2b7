# session n (~150 s): Nsight Compute on one Mistral-7B 16K launch each of the INT8 Q.K^T kernel,
# the E4M3 default and the fast mode (notes/scripts/int8_one.py). Prediction (from the SASS
# counts: INT8 687 loop instructions against E4M3's ~512 at d128): INT8 issue slots busy higher
# than E4M3's by 10-20 points, tensor pipe lower by ~10%, the difference in instructions issued
# ~+25-35%; stall "math pipe throttle" / "wait" higher in INT8.
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
for w in int8 e4m3 fast; do
  timeout 100 $NCU --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
    --section ComputeWorkloadAnalysis --section InstructionStats --kernel-name-base demangled \
    -k regex:"zyfa_attn" --launch-skip 1 --launch-count 1 python3 notes/scripts/int8_one.py $w > $OUT/ncu_$w.txt 2>&1
  echo "$w: rc $?"; grep -E "Duration|Issue Slots Busy|Issued Ipc|Executed Ipc A|Compute \(SM\) Throughput|Registers Per|Executed Instructions |Stall|Achieved Occupancy|Warp Cycles Per Issued" $OUT/ncu_$w.txt | head -14
done
