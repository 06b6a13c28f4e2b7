# run 61 (for the session after q): the Gluon decode backend's open question, then its bench.
# Apply notes/ab/gluon_decode/gluon_decode.diff to the working tree first (git apply, locally).
# 1. test_decode_gluon on the GPU: its report gives each case's error against float64 beside the
#    spec's and the Triton kernel's (run 60's three misses never reached that comparison);
# 2. the integrations files run 60's suite half did not reach (the quantizers' CUDA-graph test
#    among them); 3. `zyfa bench --cases decode`; 4. the INT8 host profile with FA3's beside it.
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
T0=$SECONDS
left() { echo $((${LIMIT:-585} - SECONDS + T0)); }
timeout 150 python3 -m pytest -q -n 16 -p no:cacheprovider -rA --tb=short tests/api/test_decode_gluon.py \
  tests/integrations > $OUT/tests.txt 2>&1; echo "tests rc $? ($((SECONDS - T0)) s)"
grep -E "vs float64|^FAILED|passed|failed" $OUT/tests.txt | cut -c1-250 | tail -20
T=$(( $(left) - 130 )); [ $T -gt 30 ] && { timeout $T python3 -m zyfa bench --cases decode --rounds 5 --out $OUT/bench \
  > $OUT/bench_decode.txt 2>&1; echo "bench rc $? ($((SECONDS - T0)) s)"
  tr '\r' '\n' < $OUT/bench_decode.txt | grep -E "GB/s|TFLOP|Error" | cut -c1-110; }
T=$(left); [ $T -gt 30 ] && { timeout $T python3 notes/scripts/host_profile.py --int8 > $OUT/host_int8.txt 2>&1
  echo "host rc $?"; grep -E "wall" $OUT/host_int8.txt; }
