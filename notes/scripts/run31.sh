# one call for session g (branch d128-wide = main + mla-tail-box + mixed-span + lab switches at
# main's values): run 28's mixed A/B, run 27's tail A/B, the whole GPU suite, 1,000 repeats of
# the FP8 running cases; memcheck if time is left
source notes/scripts/gpu_setup.sh
T0=$SECONDS
timeout 90 python3 notes/scripts/mixed_span_ab.py 2>&1 | grep -v Warning | tail -6 | tee $OUT/mixed_span.txt
timeout 150 python3 notes/scripts/tail_ab.py 2>&1 | grep -v Warning | tee $OUT/tail_ab.txt | tail -4
echo "ab done at $((SECONDS - T0)) s"
timeout 270 python3 -m pytest -q -n 16 -p no:cacheprovider --timeout 240 -rf --tb=short tests 2>&1 | tail -30 \
  | tee $OUT/suite.txt | tail -4
echo "suite done at $((SECONDS - T0)) s"
timeout 50 python3 bench/sanitize.py --backends ptx --dtypes fp8 --ref-rules running --repeats 1000 2>&1 | tail -12 \
  | tee $OUT/repeat.txt | grep -c ok
LEFT=$((555 - (SECONDS - T0)))
[ $LEFT -gt 30 ] && timeout $LEFT /usr/local/cuda/bin/compute-sanitizer --tool memcheck python3 bench/sanitize.py \
  --backends ptx --dtypes fp8 --ref-rules running 2>&1 | grep -v cuGetProcAddress | tail -6 | tee $OUT/memcheck.txt
echo "all done at $((SECONDS - T0)) s"
