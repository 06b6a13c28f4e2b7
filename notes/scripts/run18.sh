# run 18 (session d): decode + mixed bench records on the new tiles, mixed-batch A/B, trained-model E4M3-cache KL
source notes/scripts/gpu_setup.sh
mkdir -p $OUT/r
timeout 170 python3 -m zyfa bench --cases decode --rounds 3 2>&1 | grep -v "NOT MEASURED" | grep "decode\|mixed\|wrote\|Error\|error" | tail -40
cp bench/results/nvidia-h* bench/results/RESULTS* $OUT/r/ 2>/dev/null
OUT=$OUT/r timeout 120 python3 notes/scripts/mixed_ab.py 2>&1 | tail -24
timeout 250 python3 bench/e2e_transformers.py --trained --train-minutes 2 --seqlen 8192 --decode-steps 256 \
  --impls fp32_ref,sdpa,zyfa,zyfa_fp8 --reps 2 --out $OUT/r 2>&1 | tail -12
tar czf $OUT/run18.tgz -C $OUT r && rm -rf $OUT/r
