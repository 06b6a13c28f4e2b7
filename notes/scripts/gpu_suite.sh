# The whole GPU suite in two calls (each under the 600 s a call): `bash notes/scripts/gpu_suite.sh a`
# (triton, ptx, gfx950, verify, bench, spec, top level) then `... b` (api, integrations); logs under $OUT.
# On an H100 at -n 16 the whole suite took 420-480 s (runs 47-57) and more than 565 s in run 66
# (session s): run it in halves. -v: a cut run still says which tests finished.
source notes/scripts/gpu_setup.sh
case "$1" in
  a) DIRS="tests/triton tests/ptx tests/gfx950 tests/verify tests/bench tests/spec tests/test_house_rules.py tests/test_one_source.py" ;;
  b) DIRS="tests/api tests/integrations" ;;
  all) DIRS="tests" ;;
  *) echo "usage: gpu_suite.sh a|b|all"; exit 2 ;;
esac
mkdir -p $OUT
timeout ${SUITE_LIMIT:-540} python3 -m pytest -v -n 16 --dist worksteal -p no:cacheprovider --timeout 400 -rf --tb=short --durations=20 $DIRS > $OUT/suite_$1.txt 2>&1; tail -30 $OUT/suite_$1.txt
