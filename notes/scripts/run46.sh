# run 46 (for the next session; carry .whl and build/lab, made by
# `mkdir -p build/lab && git show 23b1946:zyfa/triton_kernels/quantize_int8.py > build/lab/quantize_int8_split.py`):
# the INT8 quantizer's tilings A/B (int8_quant_ab.py), the routed mixed batch's tile order timed as
# CUDA graphs (mixed_tail_ab.py; run 45's eager rounds spread 50%), then issue 55's 16K bars with
# ROUNDS rounds and medians (bars16k.py) in the time left of DEADLINE seconds. The whole suite on
# the H200 is its own call: `SUITE_LIMIT=540 bash notes/scripts/gpu_suite.sh all`.
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
DEADLINE=${DEADLINE:-570}
T0=$SECONDS
left() { echo $((DEADLINE - (SECONDS - T0))); }
(cd notes/scripts && timeout 150 python3 int8_quant_ab.py ../../build/lab/quantize_int8_split.py > $OUT/int8_quant_ab.txt 2>&1; tail -26 $OUT/int8_quant_ab.txt)
echo "int8 ab done ($((SECONDS - T0)) s)"
(cd notes/scripts && timeout 150 python3 mixed_tail_ab.py > $OUT/mixed_tail_ab.txt 2>&1; tail -12 $OUT/mixed_tail_ab.txt)
echo "mixed ab done ($((SECONDS - T0)) s)"
L=$(($(left) - 5)); [ $L -gt 90 ] || exit 0
timeout $L python3 notes/scripts/bars16k.py $OUT/bench ${ROUNDS:-7} > $OUT/bars16k.txt 2>&1; tail -6 $OUT/bars16k.txt
echo "bars done ($((SECONDS - T0)) s)"
