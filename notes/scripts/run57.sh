# run 57 (for the session after o), with notes/ab/int8_grid/int8_grid_long.diff applied to the
# working tree first (git apply, locally: the device's copy is the working tree) and after
# `SUITE_LIMIT=540 bash notes/scripts/gpu_suite.sh all` has passed on it (one call):
# the INT8 kernels under memcheck and racecheck, 1,000 launches bit for bit, and the frontier bars
# (INT8, INT8 + quantize, FA3 FP8; then land the diff and record the bench on main).
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
T0=$SECONDS
SAN=/usr/local/cuda/bin/compute-sanitizer
timeout 200 $SAN --tool memcheck python3 bench/sanitize.py --dtypes int8 > $OUT/memcheck_int8.txt 2>&1
echo "memcheck rc $? ($((SECONDS - T0)) s)"; grep -E "ERROR SUMMARY|WRONG" $OUT/memcheck_int8.txt | head
timeout 150 $SAN --tool racecheck python3 bench/sanitize.py --backends ptx --dtypes int8 > $OUT/racecheck_int8.txt 2>&1
echo "racecheck rc $? ($((SECONDS - T0)) s)"; grep -E "RACECHECK SUMMARY|hazard|WRONG" $OUT/racecheck_int8.txt | head
timeout 120 python3 bench/sanitize.py --backends ptx --dtypes int8 --repeats 1000 > $OUT/repeat_int8.txt 2>&1
echo "repeat rc $? ($((SECONDS - T0)) s)"; grep -E "differ|WRONG|ok" $OUT/repeat_int8.txt | head -8
timeout 150 python3 -m zyfa bench --cases frontier --rounds 5 \
  --methods zyfa-ptx-int8qk,zyfa-int8qk+quantize,fa3-fp8 --out $OUT/bench > $OUT/bench_frontier.txt 2>&1
echo "bench rc $? ($((SECONDS - T0)) s)"; tr '\r' '\n' < $OUT/bench_frontier.txt | grep TFLOP | cut -c1-100
