# One H200 call that checks and times what branch gpu-pending adds (the ping-pong/pin A/B, d256,
# packed batches in the generated kernels); at most 8 files back under $OUT.
#   run: bash bench/gpu_pending.sh   (carry .whl: the fa3-fwd and cudnn-frontend wheels)
set -x
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 150 python3 -m pytest tests/test_ptx_16bit.py -x -q 2>&1 | tail -20 > $OUT/pytest-16bit.txt
timeout 120 python3 -m pytest tests/test_varlen.py -x -q -k ptx 2>&1 | tail -20 > $OUT/pytest-varlen-ptx.txt
timeout 150 python3 bench/ptx16_ab.py --out $OUT/ptx16_ab.json 2>&1 | tee $OUT/ptx16_ab.txt
timeout 120 python3 bench/varlen_speed.py --out $OUT/varlen_speed.json 2>&1 | tee $OUT/varlen_speed.txt
timeout 150 python3 bench/error_repeat.py --backend ptx --dtype bf16 --out $OUT/error_repeat_bf16.json 2>&1 | tail -6
cat $OUT/pytest-16bit.txt $OUT/pytest-varlen-ptx.txt
