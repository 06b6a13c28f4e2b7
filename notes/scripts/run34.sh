# run 34 (branch k-rows): the PTX tests with K's rows in slot order (dense FP8 / INT8 calls whose
# keys are a multiple of 16), then the A/B beside FA3
source notes/scripts/gpu_setup.sh
ZYFA_LAB_SLOT_KEYS=1 timeout 200 python3 -m pytest -q -n 16 -p no:cacheprovider --timeout 180 -rf --tb=short \
  tests/ptx/test_ptx_attention.py tests/ptx/test_ptx_window.py tests/ptx/test_ptx_int8.py 2>&1 \
  | tail -15 | tee $OUT/tests.txt
timeout 300 python3 notes/scripts/slot_ab.py 2>&1 | grep -v Warning | tee $OUT/slot_ab.txt | tail -8
