# run 3: the Triton decode kernel on the GPU (checks, 1,000 repeats, tile sweep, timings beside FA3),
# then the fast mode's kernels: 1,000 launches a case bit for bit, compute-sanitizer memcheck and racecheck
source notes/scripts/gpu_setup.sh
S=/usr/local/cuda/bin/compute-sanitizer
timeout 130 python3 bench/decode_gpu.py --repeats 1000 2>&1 | tail -40 | tee $OUT/decode.txt
timeout 45 python3 bench/sanitize.py --backends ptx --dtypes fp8 --ref-rules running --repeats 1000 2>&1 | tail -12 | tee $OUT/repeat.txt
timeout 85 $S --tool memcheck python3 bench/sanitize.py --backends ptx --dtypes fp8 --ref-rules running 2>&1 | grep -v cuGetProcAddress | tail -14 | tee $OUT/memcheck.txt
timeout 85 $S --tool racecheck python3 bench/sanitize.py --backends ptx --dtypes fp8 --ref-rules running 2>&1 | tail -6 | tee $OUT/racecheck.txt
