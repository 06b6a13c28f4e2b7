# run 9 (2026-12-06 session c): the eleven tests that failed in run 7, verbose; ncu of the fast
# mode, the default kernel and FA3 FP8 at Mistral-7B 16K; the windowed PTX timings.
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
timeout 200 python3 -m pytest -v -n 8 -p no:cacheprovider --tb=long \
  $(sed 's/ *$//' notes/runs/run7/suite_failed.txt | tr '\n' ' ') > $OUT/failed_again.txt 2>&1
echo "rerun rc $?"; grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/failed_again.txt | tail -16
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
for w in fast exact fa3; do
  for shape in mistral deepseek; do
  timeout 100 $NCU --clock-control none --nvtx --nvtx-include "$w/" --set full --import-source no \
    -o $OUT/prof_${w}_${shape} -f python3 notes/scripts/profile_fast.py $w $shape > $OUT/ncu_${w}_${shape}.log 2>&1
  echo "$w $shape ncu rc $?"
  $NCU -i $OUT/prof_${w}_${shape}.ncu-rep --page details --print-units base > $OUT/details_${w}_${shape}.txt 2>&1
  $NCU -i $OUT/prof_${w}_${shape}.ncu-rep --page source --csv --print-source sass > $OUT/source_${w}_${shape}.csv 2>&1
  grep -E "Duration|Compute \(SM\) Throughput|Issue Slots Busy|Registers Per|Achieved Occupancy" $OUT/details_${w}_${shape}.txt | head -6
  done
done
rm -f $OUT/*.ncu-rep
timeout 150 python3 notes/scripts/window_ptx_gpu.py 2>&1 | tail -24 | tee $OUT/window_ptx.txt
