# run 3: the fast mode's kernels under compute-sanitizer (memcheck, racecheck) and 1,000 launches a case
source notes/scripts/gpu_setup.sh
S=/usr/local/cuda/bin/compute-sanitizer
timeout 100 python3 bench/sanitize.py --backends ptx --dtypes fp8 --ref-rules running --repeats 1000 2>&1 | tail -9 | tee $OUT/repeat.txt
timeout 110 $S --tool memcheck python3 bench/sanitize.py --backends ptx --dtypes fp8 --ref-rules running 2>&1 | grep -v cuGetProcAddress | tail -12 | tee $OUT/memcheck.txt
timeout 110 $S --tool racecheck python3 bench/sanitize.py --backends ptx --dtypes fp8 --ref-rules running 2>&1 | tail -6 | tee $OUT/racecheck.txt
