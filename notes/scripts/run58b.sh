# run 58b (session p): the Gluon keys-in-M E4M3 decode kernel's first GPU run
# (notes/scripts/decode_swap_ab.py: checks against decode_fp8_spec, GB/s beside the package's
# kernel, FA3 FP8 and a device copy), then the frontier bench's INT8 rows on int8_grid_long.diff
# (INT8, INT8 + quantize, FA3 FP8; 5 rounds).
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
T0=$SECONDS
timeout 200 python3 notes/scripts/decode_swap_ab.py > $OUT/decode_swap_ab.txt 2>&1
echo "decode rc $? ($((SECONDS - T0)) s)"; grep -E "^check|gluon|zyfa|fa3|copy" $OUT/decode_swap_ab.txt | grep -v "^{" | cut -c1-400 | tail -30
timeout $((570 - SECONDS + T0)) python3 -m zyfa bench --cases frontier --rounds 5 \
  --methods zyfa-ptx-int8qk,zyfa-int8qk+quantize,fa3-fp8 --out $OUT/bench > $OUT/bench_frontier.txt 2>&1
echo "bench rc $? ($((SECONDS - T0)) s)"; tr '\r' '\n' < $OUT/bench_frontier.txt | grep TFLOP | cut -c1-100
