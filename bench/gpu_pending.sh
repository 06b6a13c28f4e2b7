# The H200 call for branch ptx-packed-tile-counter (carry .whl and _exp/main_tree, made before the call by:
#   rm -rf _exp/main_tree && mkdir -p _exp/main_tree && git archive main zyfa | tar -x -C _exp/main_tree):
#   bash bench/gpu_pending.sh     bench/tile_counter_ab.py first (a hang shows there), the packed GPU tests,
#                                 memcheck and synccheck of the generated kernels
set -x
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
timeout 300 python3 bench/tile_counter_ab.py $OUT/tile_counter_ab.json 2>&1 | grep -v Warn | tee $OUT/tile_counter_ab.txt
timeout 300 python3 -m pytest tests/test_varlen.py tests/test_ptx_16bit.py -x -q -p no:cacheprovider -rf \
  --tb=short -k "packed or varlen or paged" 2>&1 | tail -15 > $OUT/pytest-packed.txt
tail -3 $OUT/pytest-packed.txt
timeout 150 /usr/local/cuda/bin/compute-sanitizer --tool memcheck python3 bench/sanitize.py 2>&1 \
  | grep -v "cuGetProcAddress\|Host Frame\|^=========\s*$\|Saved host backtrace" | grep -v " ok$" | tail -8 | tee $OUT/memcheck.txt
timeout 150 /usr/local/cuda/bin/compute-sanitizer --tool synccheck python3 bench/sanitize.py 2>&1 \
  | grep "ERROR SUMMARY\|Barrier\|barrier" | tail -4 | tee $OUT/synccheck.txt
