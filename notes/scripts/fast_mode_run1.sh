# run 1 of the fast mode: correctness of ref_rule "running" on the GPU, then the frontier cases
# timed: default exact, fast mode, FA3 FP8 (and the INT8 kernel) in one process
source notes/scripts/gpu_setup.sh
set -o pipefail
timeout 140 python3 -m pytest -q -x -n 8 tests/ptx/test_ptx_attention.py -k "running or dispatch" 2>&1 | tail -15 | tee $OUT/tests.txt
timeout 300 python3 -m zyfa bench --cases frontier --rounds 2 --out $OUT/res \
  --methods zyfa-ptx-fp8-exact,zyfa-ptx-fp8-exact-running,fa3-fp8,zyfa-ptx-int8qk 2>&1 | grep -v "it/s\]" | tee $OUT/bench.txt
timeout 120 python3 notes/scripts/int8_convert_ab.py 2>&1 | tee $OUT/int8_ab.txt
