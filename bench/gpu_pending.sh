# The H200 call for branch fp8-packed-vt-coalesced (carry .whl and _exp/main_tree, made before the call by:
#   rm -rf _exp/main_tree && mkdir -p _exp/main_tree && git archive main zyfa | tar -x -C _exp/main_tree):
#   bash bench/gpu_pending.sh     V^T and varlen GPU tests, then bench/packed_vt_ab.py
set -x
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
timeout 150 python3 -m pytest tests/test_varlen.py tests/test_key_order_kernel.py -x -q -p no:cacheprovider -rf \
  --tb=short -k "ptx or paged or host or packed_vt or spec" 2>&1 | tail -15 > $OUT/pytest-varlen.txt
tail -3 $OUT/pytest-varlen.txt
timeout 240 python3 bench/packed_vt_ab.py $OUT/packed_vt_ab.json 2>&1 | grep -v Warn | tee $OUT/packed_vt_ab.txt
