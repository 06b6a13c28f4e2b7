# run 56 (session o): the INT8 grid fold (notes/ab/int8_grid/int8_grid.diff) and the long layout at
# d128 from LONG_KEYS, as a package change: the GPU tests that run the INT8 mode, then the frontier
# bars for the INT8 mode beside FA3 FP8 (5 rounds, fastest and medians in the record).
# Prediction (from run 55's lab A/B, which ran the same arithmetic by lab switches): INT8 / FA3
# FP8 at Mistral-7B 16K 0.90-0.95 (run 53: 0.844 / 0.849), Qwen3-8B 16K and d128 32 heads 32K
# +4-8% over run 53's ratios, DeepSeek-V2-Lite 16K (d192: grid only, serial... its layout is
# MLA's specialized one) within -2..+3% of run 53's 0.941; end-to-end error unchanged (0.12-0.29x
# FA3's): the grid moves a block reference by at most one score step.
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
T0=$SECONDS
timeout ${TEST_S:-150} python3 -m pytest -q -n 8 -p no:cacheprovider -k "int8 or Int8 or INT8 or grid" tests > $OUT/tests_int8.txt 2>&1
echo "tests rc $? ($((SECONDS - T0)) s)"; tail -4 $OUT/tests_int8.txt
timeout ${BENCH_S:-140} python3 -m zyfa bench --cases frontier --rounds 5 \
  --methods zyfa-ptx-int8qk,zyfa-int8qk+quantize,fa3-fp8 --out $OUT/bench > $OUT/bench_frontier.txt 2>&1
echo "bench rc $? ($((SECONDS - T0)) s)"; grep -E "TFLOP" $OUT/bench_frontier.txt | sed 's/.*it\/s\]//' | cut -c1-100
