# run 13 (session c): the suite's first half (tests/api, integrations, spec) on the final code.
source notes/scripts/gpu_setup.sh
mkdir -p $OUT/r
timeout 350 python3 -m pytest -v -n 16 -p no:cacheprovider --tb=short -rf --timeout 200 tests/api tests/integrations \
  tests/spec > $OUT/r/suite_A.txt 2>&1
echo "suite A rc $?"; grep -E "^FAILED|^ERROR| passed| failed|Timeout" $OUT/r/suite_A.txt | cut -c1-200 | tail -14
grep -cE " PASSED" $OUT/r/suite_A.txt; grep -E " FAILED" $OUT/r/suite_A.txt | cut -c1-160 | head
tar czf $OUT/run13.tgz -C $OUT r && rm -rf $OUT/r
