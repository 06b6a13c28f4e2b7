# run 2: the fast mode's consumers taking turns (A/B; where they lose, the frontier below runs
# without them), the frontier with every anchor, then the Triton decode kernel's GPU check
source notes/scripts/gpu_setup.sh
set -o pipefail
timeout 110 python3 notes/scripts/turns_ab.py 2>&1 | tee $OUT/turns_ab.txt
if [ $? -eq 3 ]; then sed -i 's/^RUNNING_TURNS = True/RUNNING_TURNS = False/' zyfa/asm/ptx/specialized.py; echo "frontier WITHOUT turns"; fi
grep -n "^RUNNING_TURNS" zyfa/asm/ptx/specialized.py
timeout 310 python3 -m zyfa bench --cases frontier --rounds 2 --out $OUT/res --methods \
zyfa-ptx-fp8-exact,zyfa-ptx-fp8-exact-running,zyfa-ptx-int8qk,zyfa-auto-fp8+quantize,zyfa-auto-fp8-running+quantize,\
zyfa-int8qk+quantize,fa3-fp8,fa3-bf16,cudnn-fp8,sdpa_cudnn-bf16,sageattention-int8+quantize 2>&1 | grep -v "it/s\]" | tee $OUT/bench.txt
timeout 130 python3 bench/decode_gpu.py --repeats 1000 2>&1 | tail -30 | tee $OUT/decode.txt
