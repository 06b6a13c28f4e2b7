# run 51 (session n): the INT8 kernel's integer row max and the quantizer's instruction cuts
# (notes/ab/int8_quantizer_cuts.diff, applied in the tree) on the GPU: their GPU tests, the imax
# A/B against HEAD's PTX (int8_imax_ab.py), the k-in-one-sweep A/B (k_sweep_ab.py).
# Carry .whl and build/lab (int8_base_ptx.json).
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
T0=$SECONDS
timeout 240 python3 -m pytest -q -n 16 -p no:cacheprovider -rf --tb=short tests/ptx/test_ptx_int8.py \
  tests/ptx/test_ptx_window.py tests/api/test_int8_qk.py tests/triton/test_quantize_fused.py tests/api/test_quantize.py \
  > $OUT/int8_tests.txt 2>&1; tail -4 $OUT/int8_tests.txt
echo "tests done ($((SECONDS - T0)) s)"
PYTHONPATH=$PYTHONPATH:notes/scripts timeout 200 python3 notes/scripts/int8_imax_ab.py > $OUT/int8_imax_ab.txt 2>&1
tail -7 $OUT/int8_imax_ab.txt
echo "imax done ($((SECONDS - T0)) s)"
PYTHONPATH=$PYTHONPATH:notes/ab:notes/scripts timeout 120 python3 notes/scripts/k_sweep_ab.py > $OUT/k_sweep_ab.txt 2>&1
tail -14 $OUT/k_sweep_ab.txt
echo "k sweep done ($((SECONDS - T0)) s)"
# then the frontier bars on this tree (records into a copy of this GPU's results file)
mkdir -p $OUT/bench
GPU=$(python3 -c "import torch, re; print(re.sub('[^a-z0-9]+', '-', torch.cuda.get_device_name().lower()).strip('-'))")
[ -f bench/results/$GPU.json ] && cp bench/results/$GPU.json $OUT/bench/
M=zyfa-ptx-fp8-exact-running,zyfa-ptx-fp8-exact,zyfa-ptx-int8qk,zyfa-int8qk+quantize,fa3-fp8
timeout $((570 - (SECONDS - T0))) python3 -m zyfa bench --cases frontier --rounds 5 --methods $M --out $OUT/bench \
  > $OUT/bench_frontier.txt 2>&1
grep -v "NOT MEASURED" $OUT/bench_frontier.txt | tail -38
echo "frontier done ($((SECONDS - T0)) s)"
