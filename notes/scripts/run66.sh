# run 66 (for the session after r): run 65's slow E4M3 split calls checked (decode_paced.py:
# eager against CUDA graph, host time a call, kernel by kernel), then the whole GPU suite on
# final main in the time left (issue 58 wants it on an H100 and an H200: say which came).
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
T0=$SECONDS
timeout 120 python3 notes/scripts/decode_paced.py > $OUT/decode_paced.txt 2>&1; echo "paced rc $? ($((SECONDS - T0)) s)"
grep -E "x 32K|x 8K|split|Self CUDA time total|decode|merge" $OUT/decode_paced.txt | cut -c1-160 | head -24
T=$(( ${LIMIT:-585} - SECONDS + T0 - 5 ))
[ $T -gt 60 ] && { timeout $T python3 -m pytest -q -n 16 -p no:cacheprovider --timeout 300 -rf --tb=short tests \
  > $OUT/suite_all.txt 2>&1; echo "suite rc $? ($((SECONDS - T0)) s)"; grep -E "^FAILED|^ERROR|passed|failed" $OUT/suite_all.txt | tail -15; }
