# run 6: final main on the GPU: the windowed PTX kernels' tests first (a producer/consumer
# disagreement would hang: short timeout), the rest of the GPU suite, then the windowed PTX
# timings and the FP8 decode / mixed-batch script
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
timeout 120 python3 -m pytest -q -n 8 -p no:cacheprovider -rfE tests/ptx -k window > $OUT/suite_window.txt 2>&1; echo "window tests rc $?"
tail -15 $OUT/suite_window.txt | grep -v Warning
timeout 300 python3 -m pytest -q -n 8 -p no:cacheprovider -rfE tests -k "not window" > $OUT/suite_rest.txt 2>&1; echo "suite rc $?"
grep -E "^(FAILED|ERROR)|passed|failed" $OUT/suite_rest.txt | tail -25
timeout 60 python3 notes/scripts/window_ptx_gpu.py 2>&1 | tail -14 | tee $OUT/window_ptx.txt
timeout 100 python3 notes/scripts/decode_fp8_gpu.py 2>&1 | tail -30 | tee $OUT/decode_fp8.txt
