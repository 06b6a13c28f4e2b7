# run 67 (session s): a zyfa E4M3 decode call's host time profiled (run 66: host-paced, 235-339 us
# a call against FA3's 146 us), then the test files the session-r refactors touched (decode,
# Gluon, mixed batches, integrations, dispatch, house) on the GPU, -v.
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
T0=$SECONDS
timeout 100 python3 notes/scripts/decode_host.py > $OUT/decode_host.txt 2>&1; echo "host rc $? ($((SECONDS - T0)) s)"
grep -E "^====|wall a call" $OUT/decode_host.txt
T=$(( ${LIMIT:-300} - SECONDS + T0 - 5 ))
timeout $T python3 -m pytest -v -n 16 --dist worksteal -p no:cacheprovider --timeout 250 -rf --tb=short \
  --durations=15 tests/api/test_decode.py tests/api/test_decode_fp8.py tests/api/test_decode_gluon.py \
  tests/api/test_mixed_batch.py tests/api/test_dispatch.py tests/integrations tests/test_house_rules.py \
  > $OUT/suite_decode.txt 2>&1; echo "suite rc $? ($((SECONDS - T0)) s)"
grep -E "^FAILED|^ERROR| passed| failed|s call " $OUT/suite_decode.txt | tail -22
