# run 15 (session d): paged decode tiles (A/B) and `zyfa bench --cases decode` with the mixed batch
source notes/scripts/gpu_setup.sh
mkdir -p $OUT/r
OUT=$OUT/r timeout 150 python3 notes/scripts/paged_tile_ab.py 2>&1 | tail -20
timeout 300 python3 -m zyfa bench --cases decode --rounds 3 --out $OUT/r 2>&1 | grep -v "NOT MEASURED" | tail -30
tar czf $OUT/run15.tgz -C $OUT r && rm -rf $OUT/r
