# run 50 (session m): run 49 again after the FP8 passes went back to the 2-D butterflies (IN_RUNS
# only for the INT8 codes; run 49: the FP8 rotated call 23-32% slower with runs): the
# quantizers' GPU tests and quant_issue_ab.py. Carry .whl and build/lab.
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
T0=$SECONDS
timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider -rf --tb=short tests/triton/test_quantize_fused.py \
  tests/api/test_int8_qk.py tests/api/test_quantize.py > $OUT/quant_tests.txt 2>&1; tail -4 $OUT/quant_tests.txt
echo "tests done ($((SECONDS - T0)) s)"
timeout 120 python3 notes/scripts/quant_issue_ab.py build/lab/quantize_before.py build/lab/quantize_int8_before.py \
  > $OUT/quant_issue_ab.txt 2>&1; tail -12 $OUT/quant_issue_ab.txt
echo "ab done ($((SECONDS - T0)) s)"
