# The H200 calls that check and time branch fp8-d256 (FP8 d64 and d256 from the generator;
# carry .whl: the fa3-fwd wheel):
#   bash bench/gpu_pending.sh 1   GPU tests of the d64 / d256 kernels and every FP8 ptx test
#   bash bench/gpu_pending.sh 2   zyfa bench's d64 and d256 sweeps: the generated kernel, the
#                                 Triton kernel it replaces, FA3 FP8
set -x
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
if [ "$1" = 1 ]; then
  timeout 540 python3 -m pytest tests/test_ptx_attention.py -x -q -p no:cacheprovider -rf --tb=short 2>&1 \
    | tail -25 > $OUT/pytest-ptx-fp8.txt
  tail -3 $OUT/pytest-ptx-fp8.txt
else
  mkdir -p $OUT/results; cp bench/results/nvidia-h200.json $OUT/results/
  timeout 540 python3 -m zyfa bench --cases sweep-d64,sweep-d256 --methods zyfa-ptx-fp8-exact,zyfa-fp8-exact,fa3-fp8 \
    --out $OUT/results 2>&1 | tr '\r' '\n' | grep "TFLOP" | sed 's/.*it\]//' | tee $OUT/bench-d64-d256.txt
  rm -f $OUT/results/*.png $OUT/results/*.md
fi
