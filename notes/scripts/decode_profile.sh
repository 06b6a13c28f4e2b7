# For the session after j (~120 s): Nsight Compute on one launch each of the three E4M3 decode
# kernels at 32 x 8K (notes/scripts/decode_one.py). Prediction (written session j, from the
# arithmetic in notes/decode.md): all three at 75-88% of DRAM peak; zyfa's two issue-bound
# (issue slots busy 65-85%, SM throughput above memory's), not waiting on loads.
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for w in prefill triton fa3; do
  timeout 100 $NCU --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
    --section WarpStateStats --section LaunchStats --section ComputeWorkloadAnalysis --kernel-name-base demangled \
    -k regex:"zyfa_attn|decode_kernel|FlashAttnFwd|device_kernel" --launch-skip 1 --launch-count 1 \
    python3 notes/scripts/decode_one.py $w > $OUT/ncu_decode_$w.txt 2>&1
  echo "$w: rc $?"; grep -E "DRAM Throughput|Memory Throughput|Issue Slots Busy|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Block Size|Grid Size|Duration|Stall Long|Stall Barrier|Stall Wait" $OUT/ncu_decode_$w.txt | head -16
done
