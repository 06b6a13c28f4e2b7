# run 22: the fast mode's rescale under S(j) (A/B beside FA3), its GPU tests
source notes/scripts/gpu_setup.sh
mkdir -p $OUT/r
timeout 240 python3 notes/scripts/rescale_ab.py 2>&1 | grep -v Warning | tee $OUT/r/rescale_ab.txt | tail -8
cp $OUT/rescale_ab.json $OUT/r/ 2>/dev/null
timeout 200 python3 -m pytest -q -n 16 -p no:cacheprovider --timeout 150 -rf --tb=short tests/ptx/test_ptx_attention.py \
  tests/ptx/test_ptx_window.py -k "running or fast" 2>&1 | tail -8 | tee $OUT/r/tests.txt
tar czf $OUT/run22.tgz -C $OUT r && rm -rf $OUT/r $OUT/rescale_ab.json
