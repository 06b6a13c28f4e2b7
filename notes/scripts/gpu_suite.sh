# The whole GPU suite in two calls (each under the 600 s a call): `bash notes/scripts/gpu_suite.sh a`
# (triton, ptx, gfx950, verify, bench, spec, top level) then `... b` (api, integrations); logs under $OUT.
# On an H100 at -n 16 the whole suite ran 64% in 270 s (session g): `all` in one call may fit 540 s.
source notes/scripts/gpu_setup.sh
case "$1" in
  a) DIRS="tests/triton tests/ptx tests/gfx950 tests/verify tests/bench tests/spec tests/test_house_rules.py tests/test_one_source.py" ;;
  b) DIRS="tests/api tests/integrations" ;;
  all) DIRS="tests" ;;
  *) echo "usage: gpu_suite.sh a|b|all"; exit 2 ;;
esac
mkdir -p $OUT
timeout ${SUITE_LIMIT:-540} python3 -m pytest -q -n 16 -p no:cacheprovider --timeout 400 -rf --tb=short $DIRS > $OUT/suite_$1.txt 2>&1; tail -30 $OUT/suite_$1.txt
