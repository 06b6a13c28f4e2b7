# The H200 calls for branch ptx-uniform-desc (carry .whl and _exp/trees, made before the call
# by: rm -rf _exp/trees; for t in main:main uniform:4e61ad2 prmt:c31f967 versioned:5f6144d deferred:HEAD; do mkdir -p _exp/trees/${t%%:*};
#     git archive ${t#*:} zyfa | tar -x -C _exp/trees/${t%%:*}; done):
#   bash bench/gpu_pending.sh 1   every generated kernel's GPU tests (FP8, 16-bit, packed)
#   bash bench/gpu_pending.sh 2   bench/uniform_ab.py: each step's kernels against main's, FA3 beside
set -x
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
if [ "$1" = 1 ]; then
  timeout 560 python3 -m pytest tests/test_ptx_attention.py tests/test_ptx_16bit.py tests/test_varlen.py -x -q \
    -p no:cacheprovider -rf --tb=short -k "not triton or ptx" 2>&1 | tail -20 > $OUT/pytest-ptx.txt
  tail -3 $OUT/pytest-ptx.txt
else
  timeout 560 python3 bench/uniform_ab.py $OUT/uniform_ab.json 2>&1 | grep -v Warn | tee $OUT/uniform_ab.txt
fi
