# run 24 as one call with run 25's repeats (device time short): GPU tests of the branch's kernels,
# the wide A/B beside FA3 with end-to-end errors, the fold A/B, 1,000 launches bit for bit;
# memcheck (run 25's second half) in the next call while the machine is warm
source notes/scripts/gpu_setup.sh
mkdir -p $OUT/r
timeout 150 python3 -m pytest -q -n 16 -p no:cacheprovider --timeout 130 -rf --tb=short tests/ptx/test_ptx_attention.py \
  tests/ptx/test_ptx_window.py tests/ptx/test_ptx_int8.py 2>&1 | tail -25 | tee $OUT/r/tests.txt
timeout 220 python3 notes/scripts/wide_ab.py 2>&1 | grep -v Warning | tee $OUT/r/wide_ab.txt | tail -7
timeout 110 python3 notes/scripts/fold_ab.py 2>&1 | grep -v Warning | tee $OUT/r/fold_ab.txt | tail -4
timeout 75 python3 bench/sanitize.py --backends ptx --dtypes fp8 --ref-rules block,running --repeats 1000 2>&1 | tail -30 | tee $OUT/r/repeat.txt | grep -c ok
cp $OUT/*_ab.json $OUT/r/ 2>/dev/null
tar czf $OUT/run24.tgz -C $OUT r && rm -rf $OUT/r $OUT/*_ab.json
