# run 35 (main after k-rows): the slot-order A/B again at the long and GQA shapes (7 rounds), then
# the whole GPU suite in the time left (suite_all.txt)
source notes/scripts/gpu_setup.sh
T0=$SECONDS
SLOT_AB_ROUNDS=7 SLOT_AB_TAG=_run35 SLOT_AB_CASES="Mistral-7B 16K,d128 32 heads 32K,d128 batch 4 4K GQA 32/8,Mistral-7B 8K" \
  timeout 200 python3 notes/scripts/slot_ab.py 2>&1 | grep -v Warning | tee $OUT/slot_ab_run35.txt | tail -5
echo "A/B done at $((SECONDS - T0)) s"
sed -i "s/timeout 540/timeout $((585 - (SECONDS - T0)))/" notes/scripts/gpu_suite.sh
bash notes/scripts/gpu_suite.sh all
echo "all done at $((SECONDS - T0)) s"
