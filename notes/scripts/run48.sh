# run 48 (session m): the package of 87ed61d on the bars' cases as records in the H100's results
# file: issue 55's frontier shapes (fast, default, INT8, INT8 + quantize, FA3 FP8) in 5 rounds and
# issue 57's mixed batch (routed beside separate calls and FA3 varlen) in 7, into a copy of
# bench/results/nvidia-h100-80gb-hbm3.json under $OUT/bench.
source notes/scripts/gpu_setup.sh
mkdir -p $OUT/bench && cp bench/results/nvidia-h100-80gb-hbm3.json $OUT/bench/
T0=$SECONDS
M=zyfa-ptx-fp8-exact-running,zyfa-ptx-fp8-exact,zyfa-ptx-int8qk,zyfa-int8qk+quantize,fa3-fp8
timeout 280 python3 -m zyfa bench --cases frontier --rounds 5 --methods $M --out $OUT/bench > $OUT/bench_frontier.txt 2>&1
grep -v "NOT MEASURED" $OUT/bench_frontier.txt | tail -38
echo "frontier done ($((SECONDS - T0)) s)"
timeout 150 python3 -m zyfa bench --cases mixed --rounds 7 --out $OUT/bench > $OUT/bench_mixed.txt 2>&1
grep -v "NOT MEASURED" $OUT/bench_mixed.txt | tail -14
echo "mixed done ($((SECONDS - T0)) s)"
