# The H200 call for branch fp8-host-time (carry .whl and _exp/main_tree, made before the call by:
#   rm -rf _exp/main_tree && mkdir -p _exp/main_tree && git archive main zyfa | tar -x -C _exp/main_tree):
#   bash bench/gpu_pending.sh     the custom-op / CUDA-graph / varlen tests, then bench/host_time.py
set -x
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
timeout 200 python3 -m pytest tests/test_integrations.py tests/test_reliability.py tests/test_varlen.py -x -q -p no:cacheprovider -rf \
  --tb=short 2>&1 | tail -15 > $OUT/pytest-integrations.txt
tail -3 $OUT/pytest-integrations.txt
timeout 240 python3 bench/host_time.py $OUT/host_time.json 2>&1 | grep -v Warn | tee $OUT/host_time.txt
