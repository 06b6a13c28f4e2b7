# run 5: the fast mode's exact rule sums the unrounded exponentials (FlashAttention's sums): GPU
# tests, the A/B beside FA3, then the frontier with every anchor
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
timeout 120 python3 -m pytest -q -n 8 -p no:cacheprovider tests/ptx/test_ptx_attention.py -k "running or midpoints or fast_mode or float64" 2>&1 | grep -v "^\.\|passed\|^$" | tail -30 | tee $OUT/tests.txt
timeout 240 python3 notes/scripts/sums_ab.py 2>&1 | tail -10 | tee $OUT/sums_ab.txt
timeout 220 python3 -m zyfa bench --cases frontier --rounds 2 --out $OUT/bench 2>&1 | grep -v "NOT MEASURED" | tail -12 | tee $OUT/frontier.txt
