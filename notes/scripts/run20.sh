# run 20 (prepared in session d for the next session): the GPU suite's half that session d could
# not run (triton, ptx, gfx950, verify, bench, spec), then the mixed batch's host profile.
# Ask for kind nvidia-h200 (issue 58 still lacks the suite on an H200); both halves on whichever comes.
source notes/scripts/gpu_setup.sh
mkdir -p $OUT/r
timeout 330 python3 -m pytest -q -n 16 -p no:cacheprovider --timeout 250 -rf --tb=short tests/triton tests/ptx \
  tests/gfx950 tests/verify tests/bench tests/spec tests/test_house_rules.py tests/test_one_source.py 2>&1 | tail -12 | tee $OUT/r/tests_b.txt
timeout 120 python3 notes/scripts/mixed_host_profile.py > $OUT/r/host_profile.txt 2>&1; tail -30 $OUT/r/host_profile.txt
tar czf $OUT/run20.tgz -C $OUT r && rm -rf $OUT/r
