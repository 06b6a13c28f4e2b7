# run 60 (session q, not run: no device came): one call that lands the Gluon decode backend, with
# notes/ab/gluon_decode/gluon_decode.diff applied to the working tree first (git apply, locally).
# The GPU suite's api + integrations half (decode, mixed and the Gluon tests among them), 1,000
# launches bit for bit, memcheck, racecheck, `zyfa bench --cases decode`, then the INT8 host profile,
# each cut to what is left of ~585 s. The other half (gpu_suite.sh a) runs no decode code.
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
T0=$SECONDS
left() { echo $((${LIMIT:-585} - SECONDS + T0)); }
SAN=/usr/local/cuda/bin/compute-sanitizer
timeout 40 python3 notes/ab/rotation_error/rotation_speed.py > $OUT/rotation_speed.txt 2>&1; echo "rotation rc $?"; grep "^|" $OUT/rotation_speed.txt
timeout 60 python3 notes/scripts/decode_repeat.py --repeats 1000 > $OUT/repeat.txt 2>&1
echo "repeat rc $? ($((SECONDS - T0)) s)"; tail -2 $OUT/repeat.txt
timeout 300 python3 -m pytest -q -n 16 -p no:cacheprovider --timeout 250 -rf --tb=short tests/api tests/integrations \
  > $OUT/suite_b.txt 2>&1; echo "suite b rc $? ($((SECONDS - T0)) s)"; tail -12 $OUT/suite_b.txt
timeout 70 $SAN --tool memcheck python3 notes/scripts/decode_gluon_race.py > $OUT/memcheck.txt 2>&1
echo "memcheck rc $? ($((SECONDS - T0)) s)"; grep -E "ERROR SUMMARY|WRONG|passed|FAILED" $OUT/memcheck.txt
timeout 70 $SAN --tool racecheck python3 notes/scripts/decode_gluon_race.py > $OUT/racecheck.txt 2>&1
echo "racecheck rc $? ($((SECONDS - T0)) s)"; grep -E "RACECHECK SUMMARY|WRONG|passed|FAILED" $OUT/racecheck.txt
T=$(( $(left) - 35 )); [ $T -gt 20 ] && { timeout $T python3 -m zyfa bench --cases decode --rounds 5 --out $OUT/bench > $OUT/bench_decode.txt 2>&1
echo "bench rc $? ($((SECONDS - T0)) s)"; tr '\r' '\n' < $OUT/bench_decode.txt | grep -E "GB/s|TFLOP" | cut -c1-110; }
T=$(left); [ $T -gt 15 ] && { timeout $T python3 notes/scripts/host_profile.py --int8 > $OUT/host_int8.txt 2>&1
echo "host rc $?"; grep -E "wall" $OUT/host_int8.txt; }
