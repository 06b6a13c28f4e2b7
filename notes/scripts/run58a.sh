# run 58a (session p), after the whole GPU suite passed on int8_grid_long.diff (applied to the
# working tree): the INT8 kernels under memcheck and racecheck, 1,000 launches bit for bit.
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
T0=$SECONDS
SAN=/usr/local/cuda/bin/compute-sanitizer
timeout 250 $SAN --tool memcheck python3 bench/sanitize.py --dtypes int8 > $OUT/memcheck_int8.txt 2>&1
echo "memcheck rc $? ($((SECONDS - T0)) s)"; grep -E "ERROR SUMMARY|WRONG" $OUT/memcheck_int8.txt | head
timeout 180 $SAN --tool racecheck python3 bench/sanitize.py --backends ptx --dtypes int8 > $OUT/racecheck_int8.txt 2>&1
echo "racecheck rc $? ($((SECONDS - T0)) s)"; grep -E "RACECHECK SUMMARY|hazard|WRONG" $OUT/racecheck_int8.txt | head
timeout 120 python3 bench/sanitize.py --backends ptx --dtypes int8 --repeats 1000 > $OUT/repeat_int8.txt 2>&1
echo "repeat rc $? ($((SECONDS - T0)) s)"; grep -E "differ|WRONG|ok" $OUT/repeat_int8.txt | head -8
