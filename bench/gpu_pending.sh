# The H200 call for branch ptx16-d64-three-consumers (carry .whl and _exp/main_tree, made before the call by:
#   rm -rf _exp/main_tree && mkdir -p _exp/main_tree && git archive main zyfa | tar -x -C _exp/main_tree):
#   bash bench/gpu_pending.sh     the 16-bit GPU tests, memcheck of the 16-bit kernels, then bench/d64_ab.py
set -x
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
timeout 240 python3 -m pytest tests/test_ptx_16bit.py -x -q -p no:cacheprovider -rf --tb=short 2>&1 | tail -15 \
  > $OUT/pytest-16bit.txt
tail -3 $OUT/pytest-16bit.txt
timeout 150 /usr/local/cuda/bin/compute-sanitizer --tool memcheck python3 bench/sanitize.py --dtypes bf16,fp16 2>&1 \
  | grep -v "cuGetProcAddress\|Host Frame\|^=========\s*$\|Saved host backtrace" | grep -v " ok$" | tail -8 | tee $OUT/memcheck.txt
timeout 150 python3 bench/d64_ab.py $OUT/d64_ab.json 2>&1 | grep -v Warn | tee $OUT/d64_ab.txt
