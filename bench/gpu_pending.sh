# The H200 call for branches varlen-host-lengths and fp8-vt-triton (carry .whl; _vt/ holds
# fp8-vt-triton's tree: git archive fp8-vt-triton zyfa bench tests | tar -x -C _vt):
#   bash bench/gpu_pending.sh 1   V^T A/B (fp8-vt-triton), host-lengths A/B, varlen GPU tests
#   bash bench/gpu_pending.sh 2   zyfa bench --cases varlen
set -x
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1
if [ "$1" = 1 ]; then
  (cd _vt && PYTHONPATH=/tmp/site:$PWD timeout 150 python3 -m pytest tests/test_key_order_kernel.py -x -q -p no:cacheprovider 2>&1 | tail -2;
   PYTHONPATH=/tmp/site:$PWD timeout 200 python3 bench/vt_ab.py $OUT/vt_ab.json 2>&1 | tee $OUT/vt_ab.txt)
  export PYTHONPATH=/tmp/site:$PWD
  timeout 120 python3 bench/host_lengths_ab.py $OUT/host_lengths_ab.json 2>&1 | tee $OUT/host_lengths_ab.txt
  timeout 200 python3 -m pytest tests/test_varlen.py -x -q -p no:cacheprovider -rf --tb=short -k "ptx or paged or host" 2>&1 \
    | tail -25 > $OUT/pytest-varlen.txt
  tail -3 $OUT/pytest-varlen.txt
else
  export PYTHONPATH=/tmp/site:$PWD
  mkdir -p $OUT/results; cp bench/results/nvidia-h200.json $OUT/results/
  timeout 300 python3 -m zyfa bench --cases varlen --methods zyfa-auto-varlen-fp8,zyfa-auto-varlen-bf16,zyfa-auto-varlen-paged64-fp8,zyfa-auto-varlen-paged64-bf16,zyfa-auto-varlen-paged128-fp8,zyfa-auto-varlen-paged128-bf16,fa3-varlen-fp8,fa3-varlen-bf16,zyfa-ptx-fp8-exact,zyfa-auto-bf16,fa3-fp8,fa3-bf16 \
    --out $OUT/results 2>&1 | tr '\r' '\n' | grep "TFLOP" | sed 's/.*it\]//' | tee $OUT/bench-varlen.txt
  rm -f $OUT/results/*.png $OUT/results/*.md
fi
