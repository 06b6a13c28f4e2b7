# run 22: the fast mode's rescale under S(j) (A/B beside FA3), its GPU tests, 1,000 launches bit
# for bit and memcheck of the fast mode's kernels (new order)
source notes/scripts/gpu_setup.sh
S=/usr/local/cuda/bin/compute-sanitizer
mkdir -p $OUT/r
timeout 180 python3 notes/scripts/rescale_ab.py 2>&1 | grep -v Warning | tee $OUT/r/rescale_ab.txt | tail -8
cp $OUT/rescale_ab.json $OUT/r/ 2>/dev/null
timeout 100 python3 -m pytest -q -n 16 -p no:cacheprovider --timeout 90 -rf --tb=short tests/ptx/test_ptx_attention.py \
  tests/ptx/test_ptx_window.py -k "running or fast" 2>&1 | tail -8 | tee $OUT/r/tests.txt
timeout 45 python3 bench/sanitize.py --backends ptx --dtypes fp8 --ref-rules running --repeats 1000 2>&1 | tail -12 | tee $OUT/r/repeat.txt
timeout 70 $S --tool memcheck python3 bench/sanitize.py --backends ptx --dtypes fp8 --ref-rules running 2>&1 | grep -v cuGetProcAddress | tail -14 | tee $OUT/r/memcheck.txt
tar czf $OUT/run22.tgz -C $OUT r && rm -rf $OUT/r $OUT/rescale_ab.json
