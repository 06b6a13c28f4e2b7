# run 38 (for session j): the E4M3 kernels of bench/sanitize.py — now with the slot-order K kernels —
# 1,000 launches a case bit for bit against the first, then once under memcheck and racecheck
# (memcheck's cuGetProcAddress INVALID_VALUE reports are the driver probe's: counted apart)
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
T0=$SECONDS
timeout 200 python3 bench/sanitize.py --backends ptx --dtypes fp8 --repeats 1000 > $OUT/repeats.txt 2>&1
echo "repeats: rc $?, $(grep -c ' ok$' $OUT/repeats.txt) ok, $(grep -c WRONG $OUT/repeats.txt) wrong ($((SECONDS - T0)) s)"
for tool in memcheck racecheck; do
  timeout 150 /usr/local/cuda/bin/compute-sanitizer --tool $tool python3 bench/sanitize.py --backends ptx --dtypes fp8 \
    > $OUT/$tool.txt 2>&1
  echo "$tool: rc $?, $(grep -c ' ok$' $OUT/$tool.txt) ok, $(grep -c WRONG $OUT/$tool.txt) wrong," \
       "$(grep -c cuGetProcAddress $OUT/$tool.txt) probe lines; $(grep 'ERROR SUMMARY\|RACECHECK SUMMARY' $OUT/$tool.txt | tail -1)" \
       "($((SECONDS - T0)) s)"
done
