# run 21: the d128 layout A/B (INT8 long, fast / exact long below LONG_KEYS) and host times, then
# the GPU suite's half that session d could not run (triton, ptx, gfx950, verify, bench, spec)
source notes/scripts/gpu_setup.sh
mkdir -p $OUT/r
timeout 200 python3 notes/scripts/layout_ab.py 2>&1 | grep -v Warning | tee $OUT/r/layout_ab.txt | tail -20
cp $OUT/layout_ab.json $OUT/r/ 2>/dev/null
timeout 330 python3 -m pytest -q -n 16 -p no:cacheprovider --timeout 250 -rf --tb=short tests/triton tests/ptx \
  tests/gfx950 tests/verify tests/bench tests/spec tests/test_house_rules.py tests/test_one_source.py 2>&1 | tail -15 | tee $OUT/r/tests_b.txt
tar czf $OUT/run21.tgz -C $OUT r && rm -rf $OUT/r $OUT/layout_ab.json
