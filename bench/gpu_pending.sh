# The H200 call that checks and times branch fp8-vt-triton (carry .whl):
#   bash bench/gpu_pending.sh     the key-order kernel's GPU test and the FP8 tests that read V^T
#                                 through it, then flash_attn_func with each V^T rewrite beside FA3 FP8
set -x
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 240 python3 -m pytest tests/test_key_order_kernel.py tests/test_ptx_attention.py -x -q -p no:cacheprovider \
  -rf --tb=short 2>&1 | tail -25 > $OUT/pytest-vt.txt
tail -3 $OUT/pytest-vt.txt
timeout 300 python3 bench/vt_ab.py $OUT/vt_ab.json 2>&1 | tee $OUT/vt_ab.txt
