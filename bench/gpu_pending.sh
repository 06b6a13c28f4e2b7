# The H200 calls that check and time what branch gpu-pending adds (the pin / ping-pong /
# persistent A/B, d256, packed batches in the generated kernels); each under 10 minutes and at
# most 8 files back under $OUT.
#   bash bench/gpu_pending.sh 1    tests, then the A/B beside FA3 and SDPA
#   bash bench/gpu_pending.sh 2    varlen speed (packed and paged), BF16 error and repeatability,
#                                  quantizer + attention
# (carry .whl: the fa3-fwd and cudnn-frontend wheels)
set -x
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
if [ "$1" = 1 ]; then
  timeout 150 python3 -m pytest tests/test_ptx_16bit.py -x -q 2>&1 | tail -20 > $OUT/pytest-16bit.txt
  timeout 120 python3 -m pytest tests/test_varlen.py -x -q -k ptx 2>&1 | tail -20 > $OUT/pytest-varlen-ptx.txt
  timeout 240 python3 bench/ptx16_ab.py --out $OUT/ptx16_ab.json 2>&1 | tee $OUT/ptx16_ab.txt
  cat $OUT/pytest-16bit.txt $OUT/pytest-varlen-ptx.txt
else
  timeout 200 python3 bench/varlen_speed.py --out $OUT/varlen_speed.json 2>&1 | tee $OUT/varlen_speed.txt
  timeout 200 python3 bench/error_repeat.py --backend ptx --dtype bf16 --out $OUT/error_repeat_bf16.json 2>&1 | tail -6
  timeout 120 python3 bench/quantizer_speed.py --out $OUT/quantizer_speed.json 2>&1 | tail -8
fi
