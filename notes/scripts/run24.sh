# run 24 (branch fast-wide-tiles, next session's first call): the fast mode's wide key blocks
# (224 / 160) and the default path's fold under S: GPU tests against the spec, the two A/Bs beside
# FA3 (the wide one with end-to-end errors). Run 25 after it: 1,000 repeats and memcheck of what is kept.
source notes/scripts/gpu_setup.sh
mkdir -p $OUT/r
timeout 170 python3 -m pytest -q -n 16 -p no:cacheprovider --timeout 140 -rf --tb=short tests/ptx/test_ptx_attention.py \
  tests/ptx/test_ptx_window.py tests/ptx/test_ptx_int8.py 2>&1 | tail -25 | tee $OUT/r/tests.txt
timeout 230 python3 notes/scripts/wide_ab.py 2>&1 | grep -v Warning | tee $OUT/r/wide_ab.txt | tail -7
timeout 120 python3 notes/scripts/fold_ab.py 2>&1 | grep -v Warning | tee $OUT/r/fold_ab.txt | tail -4
cp $OUT/*_ab.json $OUT/r/ 2>/dev/null
tar czf $OUT/run24.tgz -C $OUT r && rm -rf $OUT/r $OUT/*_ab.json
