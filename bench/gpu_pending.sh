# The H200 calls that check and time branch bf16-split-kv (K and V released separately in the
# 16-bit kernel; packed launches on a persistent grid), each under the 10-minute limit.
#   bash bench/gpu_pending.sh 1    16-bit and packed GPU tests, bench/varlen_speed.py
#   bash bench/gpu_pending.sh 2    the INT8 tests (their GPU bound, this branch), zyfa bench's BF16
#                                  cases beside FA3 BF16 and SDPA cuDNN
# (carry .whl: the fa3-fwd and cudnn-frontend wheels)
set -x
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
if [ "$1" = 1 ]; then
  timeout 150 python3 -m pytest tests/test_ptx_16bit.py -x -q -p no:cacheprovider 2>&1 | tail -5 > $OUT/pytest.txt
  timeout 120 python3 -m pytest tests/test_varlen.py -x -q -p no:cacheprovider -k "ptx" 2>&1 | tail -5 >> $OUT/pytest.txt
  cat $OUT/pytest.txt
  timeout 200 python3 bench/varlen_speed.py --out $OUT/varlen_speed.json 2>&1 | grep -v "^\s*$" | tee $OUT/varlen_speed.txt
else
  timeout 100 python3 -m pytest tests/test_int8_qk.py -q -p no:cacheprovider 2>&1 | tail -5 > $OUT/pytest-int8.txt
  cat $OUT/pytest-int8.txt
  mkdir -p $OUT/results; cp bench/results/nvidia-h200.json $OUT/results/
  timeout 390 python3 -m zyfa bench --cases models,quick,sweep --methods zyfa-auto-bf16,fa3-bf16,sdpa_cudnn-bf16 \
    --out $OUT/results 2>&1 | tr '\r' '\n' | grep TFLOP > $OUT/bench-bf16.txt
  rm -f $OUT/results/*.png $OUT/results/*.md; tail -40 $OUT/bench-bf16.txt
fi
