# run 11 (session c): the tests run 10 left failing, with tracebacks (pytest-timeout so that a
# hung test names itself), then the decode split A/B. One tarball.
source notes/scripts/gpu_setup.sh
mkdir -p $OUT/r
timeout 230 python3 -m pytest -q -n 6 -p no:cacheprovider --tb=short -rf --timeout 150 \
  "tests/api/test_mixed_batch.py::test_mixed_batch_parts_are_their_paths" \
  "tests/api/test_varlen.py::test_paged_cache_in_one_launch_equals_contiguous" \
  "tests/api/test_varlen.py::test_paged_equals_contiguous" \
  "tests/integrations/test_integrations.py::test_generate_with_every_cache_matches_sdpa" \
  tests/api/test_decode_fp8.py > $OUT/r/tests.txt 2>&1
echo "tests rc $?"; grep -E "^FAILED|^ERROR| passed| failed|Timeout" $OUT/r/tests.txt | cut -c1-200 | tail -14
timeout 200 python3 notes/scripts/decode_splits_ab.py 2>&1 | tee $OUT/r/decode_ab.txt | tail -6
cp $OUT/decode_splits_ab.json $OUT/r/ 2>/dev/null
tar czf $OUT/run11.tgz -C $OUT r && rm -rf $OUT/r $OUT/decode_splits_ab.json
