# run 26 (on the final main after run 24's decisions): 1,000 launches bit for bit and memcheck of the
# FP8 kernels (run 25's), then the GPU suite's first half (triton, ptx, gfx950, verify, bench, spec, top)
source notes/scripts/gpu_setup.sh
S=/usr/local/cuda/bin/compute-sanitizer
mkdir -p $OUT/r
timeout 90 python3 bench/sanitize.py --backends ptx --dtypes fp8 --ref-rules block,running --repeats 1000 2>&1 | tail -12 | tee $OUT/r/repeat.txt
timeout 130 $S --tool memcheck python3 bench/sanitize.py --backends ptx --dtypes fp8 --ref-rules block,running 2>&1 | grep -v cuGetProcAddress | tail -12 | tee $OUT/r/memcheck.txt
timeout 330 python3 -m pytest -q -n 16 -p no:cacheprovider --timeout 250 -rf --tb=short tests/triton tests/ptx \
  tests/gfx950 tests/verify tests/bench tests/spec tests/test_house_rules.py tests/test_one_source.py 2>&1 | tail -15 | tee $OUT/r/tests_a.txt
tar czf $OUT/run26.tgz -C $OUT r && rm -rf $OUT/r
