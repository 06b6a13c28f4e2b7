# The H200 call for branch fp8-paged-vt, stacked on fp8-host-time (carry .whl and _exp/main_tree, made before
# the call by:  rm -rf _exp/main_tree && mkdir -p _exp/main_tree && git archive main zyfa | tar -x -C _exp/main_tree):
#   bash bench/gpu_pending.sh     the varlen / V^T GPU tests, then bench/paged_vt_ab.py (bench/host_time.py is
#                                 fp8-host-time's: run it from that branch, or from this one, which holds it too)
set -x
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
timeout 200 python3 -m pytest tests/test_varlen.py tests/test_key_order_kernel.py tests/test_integrations.py -x -q \
  -p no:cacheprovider -rf --tb=short 2>&1 | tail -15 > $OUT/pytest-varlen.txt
tail -3 $OUT/pytest-varlen.txt
timeout 200 python3 bench/paged_vt_ab.py $OUT/paged_vt_ab.json 2>&1 | grep -v Warn | tee $OUT/paged_vt_ab.txt
timeout 200 python3 bench/host_time.py $OUT/host_time.json 2>&1 | grep -v Warn | tee $OUT/host_time.txt
