# The H200 call that checks and times branch fp8-d256 (carry .whl: the fa3-fwd wheel):
#   bash bench/gpu_pending.sh     GPU tests of the FP8 d256 kernel, then zyfa bench's d256 sweep
#                                 (the generated kernel, the Triton kernel it replaces, FA3 FP8)
set -x
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest tests/test_ptx_attention.py -x -q -p no:cacheprovider -rf --tb=short \
  -k "d256 or negative" 2>&1 | tail -25 > $OUT/pytest-d256.txt
tail -3 $OUT/pytest-d256.txt
mkdir -p $OUT/results; cp bench/results/nvidia-h200.json $OUT/results/
timeout 330 python3 -m zyfa bench --cases sweep-d256 --methods zyfa-ptx-fp8-exact,zyfa-fp8-exact,fa3-fp8 \
  --out $OUT/results 2>&1 | tr '\r' '\n' | grep "TFLOP" | sed 's/.*it\]//' | tee $OUT/bench-d256.txt
rm -f $OUT/results/*.png $OUT/results/*.md
