# run 19 (session d): GPU tests of the API / integrations on this session's main, decode repeats and
# memcheck, and the mixed-batch A/B after the paged host work became tensor ops
source notes/scripts/gpu_setup.sh
mkdir -p $OUT/r
timeout 280 python3 -m pytest -q -n 16 -p no:cacheprovider --timeout 250 -rf --tb=short tests/api tests/integrations \
  2>&1 | tail -25 | tee $OUT/r/tests.txt
OUT=$OUT/r timeout 80 python3 notes/scripts/mixed_ab.py 2>&1 | tail -20
timeout 80 python3 notes/scripts/decode_repeat.py 2>&1 | tail -20 > $OUT/r/repeat.txt; tail -4 $OUT/r/repeat.txt
timeout 80 /usr/local/cuda/bin/compute-sanitizer --tool memcheck python3 notes/scripts/decode_repeat.py --repeats 1 2>&1 \
  | grep -v cuGetProcAddress > $OUT/r/memcheck.txt; tail -5 $OUT/r/memcheck.txt
tar czf $OUT/run19.tgz -C $OUT r && rm -rf $OUT/r
