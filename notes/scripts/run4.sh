# run 4: the fast mode's row sums with P V^T (GPU tests of the running kernels, then the A/B beside
# FA3), then the windowed Triton kernel beside FA3 (zyfa bench --cases window)
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
timeout 150 python3 -m pytest -q -n 8 -p no:cacheprovider tests/ptx/test_ptx_attention.py -k "running or spec" 2>&1 | tail -15 | tee $OUT/tests.txt
# rowsum_ab.py was removed with the variant it timed: git show 646c5ea:notes/scripts/rowsum_ab.py
timeout 260 python3 notes/scripts/rowsum_ab.py 2>&1 | tail -12 | tee $OUT/rowsum_ab.txt
timeout 150 python3 -m zyfa bench --cases window --rounds 2 --out $OUT/bench 2>&1 | tail -25 | tee $OUT/window.txt
