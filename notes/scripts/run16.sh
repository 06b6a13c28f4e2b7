# run 16-17 (session d): paged decode tiles after the page rows moved a tile ahead, and the decode GPU tests
source notes/scripts/gpu_setup.sh
mkdir -p $OUT/r
OUT=$OUT/r timeout 200 python3 notes/scripts/paged_tile_ab.py 2>&1 | tail -16
timeout 300 python3 -m pytest -q -n 8 -p no:cacheprovider --timeout 280 -rf --tb=short tests/api/test_decode.py \
  tests/api/test_decode_fp8.py tests/api/test_mixed_batch.py 2>&1 | tail -15 | tee $OUT/r/tests.txt
tar czf $OUT/run16.tgz -C $OUT r && rm -rf $OUT/r
