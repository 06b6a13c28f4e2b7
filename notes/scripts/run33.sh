# run 33 (session h): the serving mix (16 sequences, 64K tokens, GQA 32/8) and 4 x 16K packed,
# zyfa varlen FP8 / BF16 contiguous and from shuffled 64- and 128-key pages beside FA3's varlen
source notes/scripts/gpu_setup.sh
mkdir -p $OUT/r33
M=zyfa-auto-varlen-fp8,zyfa-auto-varlen-paged64-fp8,zyfa-auto-varlen-paged128-fp8,fa3-varlen-fp8
M=$M,zyfa-auto-varlen-bf16,zyfa-auto-varlen-paged64-bf16,zyfa-auto-varlen-paged128-bf16,fa3-varlen-bf16
timeout ${RUN33_LIMIT:-200} python3 -m zyfa bench --cases varlen --rounds 3 --methods $M 2>&1 \
  | grep -v "NOT MEASURED" | grep "varlen\|wrote\|Error\|error" | tail -30
cp bench/results/nvidia-h* bench/results/RESULTS* $OUT/r33/ 2>/dev/null
