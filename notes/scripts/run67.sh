# run 67 (session s): a zyfa E4M3 decode call's host time profiled (run 66: host-paced, 235-339 us
# a call against FA3's 146 us), then the whole GPU suite again, -v so that a cut run says which
# tests finished (run 66 cut it at 565 s past 99%), work-stealing against a long tail.
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
T0=$SECONDS
timeout 100 python3 notes/scripts/decode_host.py > $OUT/decode_host.txt 2>&1; echo "host rc $? ($((SECONDS - T0)) s)"
grep -E "^====|wall a call" $OUT/decode_host.txt
T=$(( ${LIMIT:-585} - SECONDS + T0 - 5 ))
timeout $T python3 -m pytest -v -n 16 --dist worksteal -p no:cacheprovider --timeout 400 -rf --tb=short \
  --durations=30 tests > $OUT/suite_all.txt 2>&1; echo "suite rc $? ($((SECONDS - T0)) s)"
grep -E "^FAILED|^ERROR| passed| failed" $OUT/suite_all.txt | tail -15; grep -c PASSED $OUT/suite_all.txt
