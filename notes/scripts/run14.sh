# run 14 (prepared 2026-12-06 session c, for the next session): issue 57's records
# (`zyfa bench --cases decode` with the mixed batch, beside FA3; the trained model's E4M3-cache
# KL) in one call; the GPU suite halves on an H200 are run8.sh-style calls of their own.
source notes/scripts/gpu_setup.sh
mkdir -p $OUT/r
timeout 200 python3 -m zyfa bench --cases decode --rounds 3 --out $OUT/r 2>&1 | grep -v "NOT MEASURED" | tail -30
timeout 330 python3 bench/e2e_transformers.py --trained --train-minutes 3 --seqlen 8192 --decode-steps 256 \
  --impls fp32_ref,sdpa,fa3,zyfa,fa3_fp8,zyfa_fp8,zyfa_int8qk --reps 3 --out $OUT/r 2>&1 | tail -14
tar czf $OUT/run14.tgz -C $OUT r && rm -rf $OUT/r
