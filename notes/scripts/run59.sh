# run 59 (session q): the Gluon E4M3 decode kernel as the package's Hopper decode backend, with
# notes/ab/gluon_decode/gluon_decode.diff applied to the working tree first (git apply, locally).
# Its GPU tests and the decode / mixed tests beside it, 1,000 launches bit for bit (paged ==
# dense), memcheck, racecheck, then `zyfa bench --cases decode` (FA3 in the same process).
# Two calls: `bash notes/scripts/run59.sh a` (the H100 questions, the tests, the repeats), then
# `... b` (the sanitizers, the decode bench). After both pass: the whole GPU suite, then land.
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
T0=$SECONDS
SAN=/usr/local/cuda/bin/compute-sanitizer
if [ "$1" != b ]; then
# the layout and two-heads questions are the H100's (the H200 answered them in run 58c)
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100; then
timeout 60 python3 notes/scripts/decode_layout_ab.py > $OUT/decode_layout_ab.txt 2>&1; echo "layout rc $?"; grep "^|" $OUT/decode_layout_ab.txt
timeout 70 python3 notes/scripts/decode_two_heads_ab.py > $OUT/decode_two_heads_ab.txt 2>&1; echo "two heads rc $?"; grep -E "^check|^\|" $OUT/decode_two_heads_ab.txt
fi
timeout 200 python3 -m pytest -q -n 16 -p no:cacheprovider --tb=short -rf tests/api/test_decode_gluon.py \
  tests/api/test_decode.py tests/api/test_decode_fp8.py tests/api/test_mixed_batch.py > $OUT/tests_decode.txt 2>&1
echo "tests rc $? ($((SECONDS - T0)) s)"; tail -4 $OUT/tests_decode.txt
timeout 90 python3 notes/scripts/decode_repeat.py --repeats 1000 > $OUT/repeat.txt 2>&1
echo "repeat rc $? ($((SECONDS - T0)) s)"; tail -2 $OUT/repeat.txt
fi
[ "$1" = a ] && exit 0
[ "$1" = ab ] && [ $((SECONDS - T0)) -gt 330 ] && { echo "no time left for b"; exit 0; }
timeout 100 $SAN --tool memcheck python3 notes/scripts/decode_gluon_race.py > $OUT/memcheck.txt 2>&1
echo "memcheck rc $? ($((SECONDS - T0)) s)"; grep -E "ERROR SUMMARY|WRONG|passed|FAILED" $OUT/memcheck.txt
timeout 100 $SAN --tool racecheck python3 notes/scripts/decode_gluon_race.py > $OUT/racecheck.txt 2>&1
echo "racecheck rc $? ($((SECONDS - T0)) s)"; grep -E "RACECHECK SUMMARY|WRONG|passed|FAILED" $OUT/racecheck.txt
timeout $((580 - SECONDS + T0)) python3 -m zyfa bench --cases decode --rounds 5 --out $OUT/bench > $OUT/bench_decode.txt 2>&1
echo "bench rc $? ($((SECONDS - T0)) s)"; tr '\r' '\n' < $OUT/bench_decode.txt | grep -E "GB/s|TFLOP" | cut -c1-110
