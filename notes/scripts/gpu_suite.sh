# The whole GPU suite in two calls (each under the 600 s a call): `bash notes/scripts/gpu_suite.sh a`
# (triton, ptx, gfx950, verify, bench, spec, top level) then `... b` (api, integrations); logs under $OUT
source notes/scripts/gpu_setup.sh
case "$1" in
  a) DIRS="tests/triton tests/ptx tests/gfx950 tests/verify tests/bench tests/spec tests/test_house_rules.py tests/test_one_source.py" ;;
  b) DIRS="tests/api tests/integrations" ;;
  *) echo "usage: gpu_suite.sh a|b"; exit 2 ;;
esac
mkdir -p $OUT
timeout 540 python3 -m pytest -q -n 16 -p no:cacheprovider --timeout 400 -rf --tb=short $DIRS 2>&1 | tail -30 | tee $OUT/suite_$1.txt
