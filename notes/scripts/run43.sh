# run 43 (session k): racecheck of the fast mode's slot-order kernels, the kept batch tables'
# mixed-batch A/B (host profile, routed against separate calls), then the bars' cases of issue 55
# (frontier shapes, the bar's modes beside FA3 FP8) in the time left (DEADLINE seconds)
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
DEADLINE=${DEADLINE:-570}
T0=$SECONDS
left() { echo $((DEADLINE - (SECONDS - T0))); }
timeout 290 /usr/local/cuda/bin/compute-sanitizer --tool racecheck python3 bench/sanitize.py --backends ptx \
  --dtypes fp8 --slot-keys --ref-rules running > $OUT/racecheck.txt 2>&1
echo "racecheck: rc $?, $(grep -c ' ok$' $OUT/racecheck.txt) ok, $(grep -c WRONG $OUT/racecheck.txt) wrong," \
     "$(grep -c cuGetProcAddress $OUT/racecheck.txt) probe lines; $(grep 'RACECHECK SUMMARY\|ERROR SUMMARY' $OUT/racecheck.txt | tail -2)" \
     "($((SECONDS - T0)) s)"
(cd notes/scripts && timeout 90 python3 mixed_host_profile.py > $OUT/mixed_host_profile.txt 2>&1; grep -i "us\|µs\|call" $OUT/mixed_host_profile.txt | head -12)
echo "host profile done ($((SECONDS - T0)) s)"
(cd notes/scripts && timeout 120 python3 mixed_ab.py > $OUT/mixed_ab.txt 2>&1; tail -25 $OUT/mixed_ab.txt)
echo "mixed ab done ($((SECONDS - T0)) s)"
L=$(($(left) - 5)); [ $L -gt 60 ] || exit 0
M=zyfa-ptx-fp8-exact-running,zyfa-ptx-fp8-exact,zyfa-ptx-int8qk,zyfa-int8qk+quantize,fa3-fp8
timeout $L python3 -m zyfa bench --cases frontier --rounds 3 --methods $M --out $OUT/bench > $OUT/bench_frontier.txt 2>&1
grep -v "NOT MEASURED" $OUT/bench_frontier.txt | tail -45
echo "bars done ($((SECONDS - T0)) s)"
