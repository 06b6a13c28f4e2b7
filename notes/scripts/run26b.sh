# run 26 (the session's last device time): run 24's MLA decisions timed again on the final main
source notes/scripts/gpu_setup.sh
timeout 150 python3 notes/scripts/mla_confirm.py 2>&1 | grep -v Warning | tail -3
tar czf $OUT/run26.tgz -C $OUT mla_confirm.json 2>/dev/null
