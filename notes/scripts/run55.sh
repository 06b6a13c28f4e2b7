# run 55 (session o; device time was short: the smallest call that answers two questions):
# 1. the keys-in-M E4M3 decode (notes/scripts/decode_swap_ab.py, prediction in its docstring);
# 2. run 54's INT8 grid / long-layout A/B (int8_long_ab.py, prediction in its docstring);
# 3. the Nsight Compute profile only if the call has time left (NCU=1).
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
T0=$SECONDS
timeout ${SWAP_S:-170} python3 notes/scripts/decode_swap_ab.py > $OUT/decode_swap_ab.txt 2>&1
echo "swap rc $? ($((SECONDS - T0)) s)"; grep -E "^\||check" $OUT/decode_swap_ab.txt | cut -c1-200
git apply notes/ab/int8_conversion/session_n/grid_variants.diff || exit 1
INT8_CASES="${INT8_CASES:-Mistral-7B 16K,Qwen3-8B 16K}" PYTHONPATH=$PYTHONPATH:notes/scripts timeout ${LONG_S:-170} python3 notes/scripts/int8_long_ab.py > $OUT/int8_long_ab.txt 2>&1
echo "long rc $? ($((SECONDS - T0)) s)"; tail -12 $OUT/int8_long_ab.txt
[ "${NCU:-0}" = 1 ] && bash notes/scripts/int8_profile.sh
echo "done ($((SECONDS - T0)) s)"
