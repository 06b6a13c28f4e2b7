# run 24 (branch fast-wide-tiles, next session's first call): the 224-key fast mode's GPU tests
# against the spec at its block, 1,000 repeats and memcheck, then the A/B beside FA3 with e2e errors
source notes/scripts/gpu_setup.sh
S=/usr/local/cuda/bin/compute-sanitizer
mkdir -p $OUT/r
timeout 150 python3 -m pytest -q -n 16 -p no:cacheprovider --timeout 120 -rf --tb=short tests/ptx/test_ptx_attention.py \
  tests/ptx/test_ptx_window.py -k "running or fast or long" 2>&1 | tail -25 | tee $OUT/r/tests.txt
timeout 45 python3 bench/sanitize.py --backends ptx --dtypes fp8 --ref-rules running --repeats 1000 2>&1 | tail -12 | tee $OUT/r/repeat.txt
timeout 70 $S --tool memcheck python3 bench/sanitize.py --backends ptx --dtypes fp8 --ref-rules running 2>&1 | grep -v cuGetProcAddress | tail -14 | tee $OUT/r/memcheck.txt
timeout 260 python3 notes/scripts/wide_ab.py 2>&1 | grep -v Warning | tee $OUT/r/wide_ab.txt | tail -6
cp $OUT/wide_ab.json $OUT/r/ 2>/dev/null
tar czf $OUT/run24.tgz -C $OUT r && rm -rf $OUT/r $OUT/wide_ab.json
