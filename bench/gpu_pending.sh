# The H200 call that checks and times branch bf16-split-kv (K and V released separately in the
# 16-bit kernel): its GPU tests, then zyfa bench's BF16 cases beside FA3 BF16 and SDPA cuDNN.
#   bash bench/gpu_pending.sh      (carry .whl: the fa3-fwd and cudnn-frontend wheels)
set -x
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 150 python3 -m pytest tests/test_ptx_16bit.py -x -q -p no:cacheprovider 2>&1 | tail -5 > $OUT/pytest-16bit.txt
timeout 60 python3 -m pytest tests/test_varlen.py -x -q -p no:cacheprovider -k "ptx and not fp8" 2>&1 | tail -5 >> $OUT/pytest-16bit.txt
cat $OUT/pytest-16bit.txt
mkdir -p $OUT/results; cp bench/results/nvidia-h200.json $OUT/results/
timeout 330 python3 -m zyfa bench --cases models,quick,sweep --methods zyfa-auto-bf16,fa3-bf16,sdpa_cudnn-bf16 \
  --out $OUT/results 2>&1 | tr '\r' '\n' | grep TFLOP > $OUT/bench-bf16.txt
rm -f $OUT/results/*.png $OUT/results/*.md; tail -40 $OUT/bench-bf16.txt
