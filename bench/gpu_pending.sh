# The H200 call for branch ptx-fp8-specialized-d128 (carry .whl and _exp/main_tree, made before the call by:
#   rm -rf _exp/main_tree && mkdir -p _exp/main_tree && git archive main zyfa | tar -x -C _exp/main_tree):
#   bash bench/gpu_pending.sh     the FP8 specialized kernels' GPU tests (MLA), then bench/spec128_ab.py
set -x
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
timeout 240 python3 -m pytest tests/test_ptx_attention.py tests/test_varlen.py -x -q -p no:cacheprovider -rf \
  --tb=short -k "192 and not triton" 2>&1 | tail -15 > $OUT/pytest-mla.txt
tail -3 $OUT/pytest-mla.txt
timeout 300 python3 bench/spec128_ab.py $OUT/spec128_ab.json 2>&1 | grep -v Warn | tee $OUT/spec128_ab.txt
