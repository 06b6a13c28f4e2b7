# run 7: the GPU suite but the window tests (run 6 ran those: all passed), verbose to a file so a
# time limit still leaves the failures; then the windowed PTX timings
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
timeout 265 python3 -m pytest -v -n 16 -p no:cacheprovider --tb=short tests -k "not window" > $OUT/suite_rest.txt 2>&1; echo "suite rc $?"
grep -E " (FAILED|ERROR) " $OUT/suite_rest.txt | sed 's/.*\] //' | sort | uniq | head -20
grep -E "passed|failed" $OUT/suite_rest.txt | tail -2
timeout 80 python3 notes/scripts/window_ptx_gpu.py 2>&1 | tail -24 | tee $OUT/window_ptx.txt
