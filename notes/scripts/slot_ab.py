"""Lab A/B (not for the package), runs 34-35: K's rows loaded in P's slot order by a 5-d TMA map
(zyfa.spec.key_order.slot_order_rows) and V^T read in its own order, so a dense FP8 call needs
no V^T rewrite (quantize_fp8's V is V^T already), against the permuted V^T (kernels._slot_rows
patched to decline); fast mode, default and INT8 beside FA3 FP8, in turns. The two differ only
in the order of the P V^T sums within a wgmma: outputs compared by their largest difference.
SLOT_AB_CASES: a comma-separated subset of CASES; SLOT_AB_ROUNDS: rounds (5)."""
import json
import os
import time

import torch

import zyfa
from ab_common import fa3_call, first_out, tflops_in_turns      # notes/scripts, on the path as a script
from zyfa.activations import make
from zyfa.asm.ptx import kernels
from zyfa.hopper_vt import natural_vt

MODES = {"fast": dict(p_rule="exact", ref_rule="running"), "default": {}}
CASES = {"d128 batch 4 4K": (4, 4096, 32, 32, 128), "d64 batch 4 8K": (4, 8192, 32, 32, 64),
         "d256 batch 4 8K": (4, 8192, 8, 8, 256), "Mistral-7B 16K": (1, 16384, 32, 8, 128),
         "DeepSeek-V2-Lite 16K": (1, 16384, 16, 16, 192), "d128 32 heads 32K": (1, 32768, 32, 32, 128),
         "d128 batch 4 4K GQA 32/8": (4, 4096, 32, 8, 128), "Mistral-7B 8K": (1, 8192, 32, 8, 128)}
INT8_CASES = ("d128 batch 4 4K", "Mistral-7B 16K", "d128 batch 4 4K GQA 32/8", "Mistral-7B 8K")
SLOT_ROWS = kernels._slot_rows


def variant(slot, call):
    def run():
        kernels._slot_rows = SLOT_ROWS if slot else (lambda *args: None)
        try:
            return call()
        finally:
            kernels._slot_rows = SLOT_ROWS
    return run


pick = os.environ.get("SLOT_AB_CASES")
cases = {n: CASES[n] for n in pick.split(",")} if pick else {n: CASES[n] for n in list(CASES)[:6]}
rows = []
for name, (B, S, Hq, Hkv, D) in cases.items():
    dv = 128 if D == 192 else D
    q, k, v = make("realistic", B, S, Hq, Hkv, D, dv, seed=34, device="cuda")
    x = zyfa.quantize_fp8(q, k, v)
    calls = {"fa3": fa3_call(x)}
    for mode, kw in MODES.items():
        for slot in (False, True):
            calls[f"{mode} {'slot' if slot else 'main'}"] = variant(
                slot, lambda kw=kw: zyfa.flash_attn_func(**x.kwargs(), causal=True, backend="ptx", **kw))
    if name in INT8_CASES:
        xi = zyfa.quantize_int8_qk(q, k, v)
        for slot in (False, True):
            calls[f"int8 {'slot' if slot else 'main'}"] = variant(
                slot, lambda: zyfa.flash_attn_func(**xi.kwargs(), causal=True, backend="ptx"))
    del q, k, v
    modes = [m for m in ("fast", "default", "int8") if f"{m} main" in calls]
    diff = {}
    for m in modes:
        a, b = first_out(calls[f"{m} main"]()).float(), first_out(calls[f"{m} slot"]()).float()
        diff[m] = ((a - b).abs().max() / a.abs().max()).item()
    tf, times = tflops_in_turns(calls, 2 * B * Hq * (S * (S + 1) / 2) * (D + dv),
                                rounds=int(os.environ.get("SLOT_AB_ROUNDS", "5")))
    med = {key: sorted(t)[len(t) // 2] for key, t in times.items()}
    rows.append(dict(case=name, tflops=tf, ms=times, max_rel_diff=diff, v_view=natural_vt(x.v) is not None))
    print(f"{name:24s} " + " | ".join(f"{m}: {tf[f'{m} main']:.0f} -> {tf[f'{m} slot']:.0f} "
                                      f"(min {tf[f'{m} slot'] / tf[f'{m} main']:.3f}, median "
                                      f"{med[f'{m} main'] / med[f'{m} slot']:.3f}; {tf[f'{m} slot'] / tf['fa3']:.3f}x fa3)"
                                      for m in modes)
          + f" | fa3 {tf['fa3']:.0f} | diff {', '.join(f'{d:.1e}' for d in diff.values())}", flush=True)
    del x, calls
    torch.cuda.empty_cache()
with open(os.path.join(os.environ.get("OUT", "."), f"slot_ab{os.environ.get('SLOT_AB_TAG', '')}.json"), "w") as fh:
    json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, date=time.strftime("%Y-%m-%d %H:%M UTC",
                   time.gmtime()), rows=rows), fh, indent=1)
