# run 40 (session j): run 38's sanitizer pass, shortened to fit one call: every E4M3 PTX case 1,000
# launches bit for bit; memcheck over the slot-order K cases (36), racecheck over their fast-mode six
# (racecheck runs ~10 s a case; the other shapes ran under it in earlier sessions)
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
T0=$SECONDS
timeout 180 python3 bench/sanitize.py --backends ptx --dtypes fp8 --repeats 1000 > $OUT/repeats.txt 2>&1
echo "repeats: rc $?, $(grep -c ' ok$' $OUT/repeats.txt) ok, $(grep -c WRONG $OUT/repeats.txt) wrong ($((SECONDS - T0)) s)"
run_tool() {
  timeout $2 /usr/local/cuda/bin/compute-sanitizer --tool $1 python3 bench/sanitize.py --backends ptx --dtypes fp8 $3 \
    > $OUT/$1.txt 2>&1
  echo "$1: rc $?, $(grep -c ' ok$' $OUT/$1.txt) ok, $(grep -c WRONG $OUT/$1.txt) wrong," \
       "$(grep -c cuGetProcAddress $OUT/$1.txt) probe lines; $(grep 'ERROR SUMMARY\|RACECHECK SUMMARY' $OUT/$1.txt | tail -1)" \
       "($((SECONDS - T0)) s)"
}
run_tool memcheck 170 --slot-keys
run_tool racecheck 200 "--slot-keys --ref-rules running"
