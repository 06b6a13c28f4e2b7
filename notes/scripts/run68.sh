# run 68 (for the session after s): the decode host time after session s's trim (decode_paced.py:
# eager, CUDA graph and host a call beside FA3; run 66 had gluon 235 / triton 274 us at 8 x 32K,
# FA3 146), the host profile (decode_host.py), the merge-in-kernel A/B (decode_fused_ab.py), then the GPU suite in two halves with -v, so a cut
# half says which tests finished (run 66's one call was cut at 565 s past 99%). Say which GPU came;
# issue 58 wants the suite on an H100 and an H200 on final main. `LIMIT` (s) bounds the call.
source notes/scripts/gpu_setup.sh          # .whl: bash notes/scripts/fetch_wheels.sh first (a new checkout)
mkdir -p $OUT
T0=$SECONDS
[ -z "$SKIP_DECODE" ] && { timeout 120 python3 notes/scripts/decode_paced.py > $OUT/decode_paced.txt 2>&1; echo "paced rc $? ($((SECONDS - T0)) s)"
grep -E "x 32K|x 8K" $OUT/decode_paced.txt | cut -c1-160
timeout 100 python3 notes/scripts/decode_host.py > $OUT/decode_host.txt 2>&1; echo "host rc $? ($((SECONDS - T0)) s)"
grep -E "^====|wall a call" $OUT/decode_host.txt
timeout 150 python3 notes/scripts/decode_fused_ab.py > $OUT/decode_fused_ab.txt 2>&1; echo "fused rc $? ($((SECONDS - T0)) s)"
grep -E "page|x 32K|x 8K" $OUT/decode_fused_ab.txt | cut -c1-170; }
for half in ${HALVES:-a b}; do          # a second call: HALVES=b (or a) and SKIP_DECODE=1
  T=$(( ${LIMIT:-585} - SECONDS + T0 - 5 )); [ $T -lt 60 ] && break
  SUITE_LIMIT=$T bash notes/scripts/gpu_suite.sh $half > /dev/null 2>&1; echo "suite $half ($((SECONDS - T0)) s)"
  grep -E "^FAILED|^ERROR| passed| failed" $OUT/suite_$half.txt | tail -8
done
