# run 8 (next session, prepared 2026-12-06): the GPU suite in two halves (each under a call's
# limit; verbose to files so a cut call still names its failures), then the windowed PTX timings
# and the frontier. Call A: bash notes/scripts/run8.sh A ; call B: bash notes/scripts/run8.sh B
source notes/scripts/gpu_setup.sh
mkdir -p $OUT
if [ "$1" = A ]; then
  timeout 420 python3 -m pytest -v -n 16 -p no:cacheprovider --tb=short tests/api tests/integrations tests/spec \
    > $OUT/suite_A.txt 2>&1; echo "suite A rc $?"
  grep -E "FAILED|passed|failed" $OUT/suite_A.txt | sed 's/.*FAILED /FAILED /' | sort -u | tail -25
  timeout 120 python3 notes/scripts/window_ptx_gpu.py 2>&1 | tail -24 | tee $OUT/window_ptx.txt
else
  timeout 330 python3 -m pytest -v -n 16 -p no:cacheprovider --tb=short tests --ignore=tests/api \
    --ignore=tests/integrations --ignore=tests/spec > $OUT/suite_B.txt 2>&1; echo "suite B rc $?"
  grep -E "FAILED|passed|failed" $OUT/suite_B.txt | sed 's/.*FAILED /FAILED /' | sort -u | tail -25
  timeout 220 python3 -m zyfa bench --cases frontier --rounds 2 --out $OUT/bench 2>&1 | grep -v "NOT MEASURED" | tail -8
fi
