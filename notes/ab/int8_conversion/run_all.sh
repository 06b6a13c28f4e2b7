#!/bin/bash
# scratch: every variant's d128 causal exact INT8 kernel (and the E4M3 baselines) -> out/, then counts
cd /tmp/i8fold
for v in base imax fold grid fold_imax grid_imax imax_preset grid_imax_preset; do ZYFA_I8VAR=$v python gen.py $v 128 | grep -v "^    "; done
cd out && python ../dyn.py base_e4m3_d128.sass base_e4m3_slot_d128.sass *_int8_d128.sass | grep -v "steady mix"
