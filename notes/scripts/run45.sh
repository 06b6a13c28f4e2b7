# run 45 (session l): where the INT8 quantizer's time goes at DeepSeek-V2-Lite 16K (issue 55's
# +quantize bar there: 0.785x, bar 0.85x) and Mistral-7B 16K, part by part; then run 44 (the
# packed kernels' racecheck, the routed mixed batch's tile-order A/B).
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
T0=$SECONDS
(cd notes/scripts && timeout ${PARTS_LIMIT:-90} python3 int8_quant_parts.py > $OUT/int8_quant_parts.txt 2>&1; tail -4 $OUT/int8_quant_parts.txt)
echo "parts done ($((SECONDS - T0)) s)"
bash notes/scripts/run44.sh
