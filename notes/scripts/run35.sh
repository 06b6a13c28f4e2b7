# run 35 (main after k-rows): the GPU suite but tests/ptx (run 34 ran those with the slot-order K
# on: the same code as main's, switch aside), then the slot-order A/B again at the long and GQA
# shapes in the time left
source notes/scripts/gpu_setup.sh
T0=$SECONDS
mkdir -p $OUT
timeout 310 python3 -m pytest -q -n 16 -p no:cacheprovider --timeout 280 -rf --tb=short --ignore=tests/ptx tests \
  > $OUT/suite_noptx.txt 2>&1; tail -12 $OUT/suite_noptx.txt
echo "suite done at $((SECONDS - T0)) s"
SLOT_AB_TAG=_run35 SLOT_AB_CASES="Mistral-7B 16K,d128 batch 4 4K GQA 32/8" \
  timeout $((${RUN35_LIMIT:-400} - (SECONDS - T0))) python3 notes/scripts/slot_ab.py 2>&1 | grep -v Warning | tee $OUT/slot_ab_run35.txt | tail -5
echo "all done at $((SECONDS - T0)) s"
