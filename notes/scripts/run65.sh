# run 65 (session r, a short call): the Gluon decode test's float64 figures, then `zyfa bench
# --cases decode` in the time left (gluon_decode.diff applied locally first).
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
T0=$SECONDS
left() { echo $((${LIMIT:-330} - SECONDS + T0)); }
timeout 120 python3 -m pytest -q -n 16 -p no:cacheprovider -rA --tb=short tests/api/test_decode_gluon.py \
  > $OUT/gluon_tests.txt 2>&1; echo "tests rc $? ($((SECONDS - T0)) s)"
grep -E "vs float64|^FAILED|passed|failed" $OUT/gluon_tests.txt | cut -c1-250 | tail -20
T=$(( $(left) - 5 )); [ $T -gt 40 ] && { timeout $T python3 -m zyfa bench --cases decode --rounds 3 --out $OUT/bench \
  > $OUT/bench_decode.txt 2>&1; echo "bench rc $? ($((SECONDS - T0)) s)"
  tr '\r' '\n' < $OUT/bench_decode.txt | grep -E "GB/s|TFLOP|Error" | cut -c1-110; }
