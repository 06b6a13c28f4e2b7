# run 12 (session c): the tests fixed after run 11 (tracebacks kept), the host-time profile of a
# fast-mode call, then the suite's second half (everything but tests/api, integrations, spec).
source notes/scripts/gpu_setup.sh
mkdir -p $OUT/r
timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider --tb=short -rf --timeout 150 \
  "tests/api/test_mixed_batch.py" "tests/api/test_varlen.py::test_paged_cache_in_one_launch_equals_contiguous" \
  "tests/api/test_varlen.py::test_paged_equals_contiguous" \
  "tests/integrations/test_integrations.py::test_generate_with_every_cache_matches_sdpa" \
  tests/api/test_decode_fp8.py tests/api/test_decode.py > $OUT/r/tests.txt 2>&1
echo "tests rc $?"; grep -E "^FAILED|^ERROR| passed| failed|Timeout" $OUT/r/tests.txt | cut -c1-200 | tail -12
timeout 60 python3 notes/scripts/host_profile.py > $OUT/r/host_profile.txt 2>&1; head -c 2500 $OUT/r/host_profile.txt | head -14
timeout 280 python3 -m pytest -q -n 16 -p no:cacheprovider --tb=short -rf --timeout 200 tests --ignore=tests/api \
  --ignore=tests/integrations --ignore=tests/spec > $OUT/r/suite_B.txt 2>&1
echo "suite B rc $?"; grep -E "^FAILED|^ERROR| passed| failed|Timeout" $OUT/r/suite_B.txt | cut -c1-200 | tail -14
tar czf $OUT/run12.tgz -C $OUT r && rm -rf $OUT/r
