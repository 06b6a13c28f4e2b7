# run 45 (session l): run 44 (the packed kernels' racecheck, the routed mixed batch's tile-order
# A/B) and where the INT8 quantizer's time goes at DeepSeek-V2-Lite 16K (issue 55's
# +quantize bar there: 0.785x, bar 0.85x) and Mistral-7B 16K, per launch.
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
T0=$SECONDS
python3 notes/ab/quantizer_profile.py $OUT/quantizer_profile.json --shape 1,16384,16,16,192,128 \
  --shape 1,16384,32,8,128 --only "int8 default,int8 no smooth,int8 no had,int8 plain" > $OUT/quantizer_profile.txt 2>&1
tail -40 $OUT/quantizer_profile.txt
echo "profile done ($((SECONDS - T0)) s)"
bash notes/scripts/run44.sh
