# run 10 (session c): tests the last suite left failing and the changed preparation's tests,
# then the one-launch preparation A/B (notes/scripts/prep_ab.py). Everything into one tarball.
source notes/scripts/gpu_setup.sh
mkdir -p $OUT/r
timeout 240 python3 -m pytest -v -n 16 -p no:cacheprovider --tb=short \
  tests/api/test_decode.py::test_bad_arguments tests/api/test_dispatch.py \
  tests/api/test_mixed_batch.py::test_mixed_batch_parts_are_their_paths \
  tests/api/test_varlen.py::test_paged_cache_in_one_launch_equals_contiguous \
  tests/api/test_varlen.py::test_paged_equals_contiguous \
  tests/integrations/test_integrations.py::test_generate_with_every_cache_matches_sdpa \
  tests/spec/test_rule_branches.py tests/triton/test_key_order_kernel.py tests/ptx/test_ptx_attention.py \
  > $OUT/r/tests.txt 2>&1
echo "tests rc $?"; grep -E "^FAILED|^ERROR| passed| failed" $OUT/r/tests.txt | sed 's/ - .*//' | sort -u | tail -20
timeout 300 python3 notes/scripts/prep_ab.py 2>&1 | tee $OUT/r/prep_ab.txt | tail -12
cp $OUT/prep_ab.json $OUT/r/ 2>/dev/null
tar czf $OUT/run10.tgz -C $OUT r && rm -rf $OUT/r $OUT/prep_ab.json
