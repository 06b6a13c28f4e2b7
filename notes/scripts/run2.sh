# run 2: the fast mode's consumers taking turns (A/B), then the Triton decode kernel's GPU check and timings
source notes/scripts/gpu_setup.sh
set -o pipefail
timeout 60 python3 -m pytest -q -x -n 8 tests/test_ptx_attention.py -k "running" 2>&1 | tail -3 | tee $OUT/tests.txt
timeout 200 python3 notes/scripts/turns_ab.py 2>&1 | tee $OUT/turns_ab.txt
timeout 90 python3 -m pytest -q -x -n 8 tests/test_decode.py 2>&1 | tail -3 | tee -a $OUT/tests.txt
timeout 200 python3 bench/decode_gpu.py 2>&1 | tail -40 | tee $OUT/decode.txt
