# run 44 (session k): the packed kernels' tile hand-over read by lane 0 alone (racecheck flagged the
# all-lane read against the producer's next write in run 43): racecheck over the packed variants
# only (FP8 d64-d256, BF16 d128 / d256), then the packed kernels' GPU tests
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
T0=$SECONDS
timeout 200 /usr/local/cuda/bin/compute-sanitizer --tool racecheck python3 bench/sanitize.py --backends ptx \
  --dtypes fp8,bf16 --ref-rules none --slot-keys > $OUT/racecheck_packed.txt 2>&1
echo "racecheck: rc $?, $(grep -c 'equal to a call' $OUT/racecheck_packed.txt) equal, $(grep -c WRONG $OUT/racecheck_packed.txt) wrong;" \
     "$(grep 'RACECHECK SUMMARY' $OUT/racecheck_packed.txt | tail -1) ($((SECONDS - T0)) s)"
grep -B1 -A2 "Error: Race" $OUT/racecheck_packed.txt | head -12
timeout $((${RUN44_LIMIT:-390} - (SECONDS - T0))) python3 -m pytest -q -n 16 -p no:cacheprovider -rf --tb=short \
  tests/api/test_varlen.py tests/ptx/test_ptx_16bit.py tests/api/test_mixed_batch.py > $OUT/packed_tests.txt 2>&1
tail -4 $OUT/packed_tests.txt; echo "tests done ($((SECONDS - T0)) s)"
