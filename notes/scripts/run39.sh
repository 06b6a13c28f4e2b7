# run 39 (session j, branch session-j = main + decode-ptx): the in-kernel V transpose's GPU test and
# rate, the serial prefill kernel as a GQA-packed decode bound (run 38b's script), the serving mix
# with its record (fast, default, FA3 varlen FP8), then run 38's sanitizer cases if time is left
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
T0=$SECONDS
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/ptx/test_vt_transpose.py 2>&1 | tail -5
echo "vt test done ($((SECONDS - T0)) s)"
timeout 60 python3 notes/scripts/vt_rate.py 2>&1 | tail -10
echo "vt rate done ($((SECONDS - T0)) s)"
timeout 120 python3 notes/scripts/decode_via_prefill.py 2>&1 | tail -20
echo "decode via prefill done ($((SECONDS - T0)) s)"
M=zyfa-auto-varlen-fp8-exact-running,zyfa-auto-varlen-fp8,fa3-varlen-fp8
timeout 150 python3 -m zyfa bench --cases varlen --rounds 3 --methods $M > $OUT/bench_varlen.txt 2>&1
grep -v "NOT MEASURED" $OUT/bench_varlen.txt | grep "varlen\|wrote\|rror" | tail -12
find bench/results -name "*.json" -mmin -4 -exec cp {} $OUT/ \; ; ls $OUT
echo "serving mix done ($((SECONDS - T0)) s)"
# the routed mixed batch's host time, where it goes (cProfile's top functions; ~20 s)
(cd notes/scripts && timeout 90 python3 mixed_host_profile.py > $OUT/mixed_host_profile.txt 2>&1; tail -45 $OUT/mixed_host_profile.txt)
echo "host profile done ($((SECONDS - T0)) s)"
