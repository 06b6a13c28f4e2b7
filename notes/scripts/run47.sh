# run 47 (session m): the routed mixed batch with its decode tiles left out (mixed_left_out_ab.py),
# then issue 55's 16K bars with INT8 + quantize (sums in 1024-element tiles) in ROUNDS rounds.
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
DEADLINE=${DEADLINE:-300}
T0=$SECONDS
(cd notes/scripts && timeout 120 python3 mixed_left_out_ab.py > $OUT/mixed_left_out_ab.txt 2>&1; tail -10 $OUT/mixed_left_out_ab.txt)
echo "mixed ab done ($((SECONDS - T0)) s)"
L=$((DEADLINE - (SECONDS - T0) - 5)); [ $L -gt 60 ] || exit 0
timeout $L python3 notes/scripts/bars16k.py $OUT/bench ${ROUNDS:-5} > $OUT/bars16k.txt 2>&1; tail -6 $OUT/bars16k.txt
echo "bars done ($((SECONDS - T0)) s)"
