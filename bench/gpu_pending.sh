# The H200 calls that check and time branch bf16-split-kv, each under the 10-minute limit
# (carry .whl: the fa3-fwd and cudnn-frontend wheels, and _exp: `python bench/ptx16_ab.py
# --prepare-baseline main` writes the baseline's PTX there on the CPU first).
#   bash bench/gpu_pending.sh 1    16-bit GPU tests, then the A/B (split, split + late rescale,
#                                  main's kernel) beside FA3 BF16 and SDPA cuDNN
#   bash bench/gpu_pending.sh 2    packed/paged GPU tests, bench/varlen_speed.py (persistent
#                                  packed grid), the INT8 tests (their GPU bound)
#   bash bench/gpu_pending.sh 3    zyfa bench's BF16 cases (after the losers are deleted)
set -x
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
if [ "$1" = 1 ]; then
  timeout 160 python3 -m pytest tests/test_ptx_16bit.py -x -q -p no:cacheprovider 2>&1 | tail -5 > $OUT/pytest-16bit.txt
  cat $OUT/pytest-16bit.txt
  timeout 360 python3 bench/ptx16_ab.py --out $OUT/ptx16_ab.json 2>&1 | tee $OUT/ptx16_ab.txt
elif [ "$1" = 2 ]; then
  timeout 120 python3 -m pytest tests/test_varlen.py -x -q -p no:cacheprovider -k "ptx" 2>&1 | tail -5 > $OUT/pytest.txt
  timeout 100 python3 -m pytest tests/test_int8_qk.py -q -p no:cacheprovider 2>&1 | tail -5 >> $OUT/pytest.txt
  cat $OUT/pytest.txt
  timeout 200 python3 bench/varlen_speed.py --out $OUT/varlen_speed.json 2>&1 | grep -v "^\s*$" | tee $OUT/varlen_speed.txt
else
  mkdir -p $OUT/results; cp bench/results/nvidia-h200.json $OUT/results/
  timeout 480 python3 -m zyfa bench --cases models,quick,sweep --methods zyfa-auto-bf16,fa3-bf16,sdpa_cudnn-bf16 \
    --out $OUT/results 2>&1 | tr '\r' '\n' | grep TFLOP > $OUT/bench-bf16.txt
  rm -f $OUT/results/*.png $OUT/results/*.md; tail -40 $OUT/bench-bf16.txt
fi
