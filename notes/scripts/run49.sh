# run 49 (session m): the quantizers' instruction cuts on the GPU: their GPU tests (bits against
# the PyTorch path, FMA_DIV on), quant_issue_ab.py (before / after in one process, bytes compared),
# then the 16K bars with INT8 + quantize. Carry .whl and build/lab (quantize_before.py,
# quantize_int8_before.py: main's modules), with notes/ab/int8_quantizer_cuts.diff applied to the tree.
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
T0=$SECONDS
timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider -rf --tb=short tests/triton/test_quantize_fused.py \
  tests/api/test_int8_qk.py tests/api/test_quantize.py > $OUT/quant_tests.txt 2>&1; tail -4 $OUT/quant_tests.txt
echo "tests done ($((SECONDS - T0)) s)"
timeout 120 python3 notes/scripts/quant_issue_ab.py build/lab/quantize_before.py build/lab/quantize_int8_before.py \
  > $OUT/quant_issue_ab.txt 2>&1; tail -12 $OUT/quant_issue_ab.txt
echo "ab done ($((SECONDS - T0)) s)"
[ -z "$NO_BARS" ] || exit 0
timeout 150 python3 notes/scripts/bars16k.py $OUT/bench 5 > $OUT/bars16k.txt 2>&1; tail -5 $OUT/bars16k.txt
echo "bars done ($((SECONDS - T0)) s)"
