# run 41 (session j; the device budget left room for one call): run 39's steps, then run 40's
# repeats and memcheck, each step only while the call's time lasts (DEADLINE seconds)
DEADLINE=${DEADLINE:-530}
T0=$SECONDS
left() { echo $((DEADLINE - (SECONDS - T0))); }
bash notes/scripts/run39.sh
source notes/scripts/gpu_setup.sh > /dev/null
L=$(($(left) - 10)); [ $L -gt 30 ] || exit 0
timeout $((L < 150 ? L : 150)) python3 bench/sanitize.py --backends ptx --dtypes fp8 --repeats 1000 > $OUT/repeats.txt 2>&1
echo "repeats: rc $?, $(grep -c ' ok$' $OUT/repeats.txt) ok, $(grep -c WRONG $OUT/repeats.txt) wrong ($((SECONDS - T0)) s)"
L=$(($(left) - 5)); [ $L -gt 40 ] || exit 0
timeout $L /usr/local/cuda/bin/compute-sanitizer --tool memcheck python3 bench/sanitize.py --backends ptx --dtypes fp8 \
  --slot-keys > $OUT/memcheck.txt 2>&1
echo "memcheck: rc $?, $(grep -c ' ok$' $OUT/memcheck.txt) ok, $(grep -c WRONG $OUT/memcheck.txt) wrong," \
     "$(grep -c cuGetProcAddress $OUT/memcheck.txt) probe lines; $(grep 'ERROR SUMMARY' $OUT/memcheck.txt | tail -1)" \
     "($((SECONDS - T0)) s)"
