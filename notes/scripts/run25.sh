# run 25 (after run 24's decisions): 1,000 launches bit for bit and memcheck of the FP8 kernels,
# default and fast mode
source notes/scripts/gpu_setup.sh
S=/usr/local/cuda/bin/compute-sanitizer
mkdir -p $OUT/r
timeout 90 python3 bench/sanitize.py --backends ptx --dtypes fp8 --ref-rules block,running --repeats 1000 2>&1 | tail -20 | tee $OUT/r/repeat.txt
timeout 150 $S --tool memcheck python3 bench/sanitize.py --backends ptx --dtypes fp8 --ref-rules block,running 2>&1 | grep -v cuGetProcAddress | tail -20 | tee $OUT/r/memcheck.txt
tar czf $OUT/run25.tgz -C $OUT r && rm -rf $OUT/r
