# run 44 (session k, for the next session): the packed kernels' tile hand-over read by lane 0
# alone (racecheck flagged the all-lane read against the producer's next write in run 43):
# racecheck over the packed variants only (FP8 d64-d256, BF16 d128 / d256); then the routed
# mixed batch's tile-order A/B (notes/scripts/mixed_tail_ab.py). The whole suite on the final main is
# its own call: `SUITE_LIMIT=550 bash notes/scripts/gpu_suite.sh all`.
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
T0=$SECONDS
timeout ${RC_LIMIT:-240} /usr/local/cuda/bin/compute-sanitizer --tool racecheck python3 bench/sanitize.py --backends ptx \
  --dtypes fp8,bf16 --ref-rules none --slot-keys > $OUT/racecheck_packed.txt 2>&1
echo "racecheck: rc $?, $(grep -c 'equal to a call' $OUT/racecheck_packed.txt) equal, $(grep -c WRONG $OUT/racecheck_packed.txt) wrong;" \
     "$(grep 'RACECHECK SUMMARY' $OUT/racecheck_packed.txt | tail -1) ($((SECONDS - T0)) s)"
grep -B1 -A2 "Error: Race" $OUT/racecheck_packed.txt | head -12
(cd notes/scripts && timeout ${AB_LIMIT:-120} python3 mixed_tail_ab.py 2>&1 | tee $OUT/mixed_tail_ab.txt | tail -5)
echo "done ($((SECONDS - T0)) s)"
