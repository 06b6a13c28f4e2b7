# run 46 (for the next session): the routed mixed batch's tile order timed as CUDA graphs (the
# GPU's work alone; run 45's rounds over eager calls spread 50%), then issue 55's 16K bars with
# 7 rounds and medians (notes/scripts/bars16k.py). The whole suite on the H200 is its own call:
# `SUITE_LIMIT=540 bash notes/scripts/gpu_suite.sh all`.
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
T0=$SECONDS
(cd notes/scripts && timeout ${AB_LIMIT:-150} python3 mixed_tail_ab.py 2>&1 | tee $OUT/mixed_tail_ab.txt | tail -12)
echo "mixed ab done ($((SECONDS - T0)) s)"
timeout ${BARS_LIMIT:-400} python3 notes/scripts/bars16k.py $OUT/bench ${ROUNDS:-7} > $OUT/bars16k.txt 2>&1; tail -6 $OUT/bars16k.txt
echo "bars done ($((SECONDS - T0)) s)"
