"""Lab A/B (not for the package), run 22: the fast mode's pipelined consumer (d128 long, MLA,
d256) rescaling the total by alpha(j - 1) between issuing S(j) and P(j - 1) V^T (FlashAttention-3's
order; specialized.RESCALE_UNDER_S) against after the P V^T wait (old); the long d128 layout in six
stages instead of four; and the serial layout at 16K-32K for the fast mode. Timed in turns (3
rounds) in one process beside FA3 FP8; outputs of every variant compared bit for bit with old."""
import dataclasses
import json
import os
import time

import torch

import zyfa
from ab_common import fa3_call, first_out, tflops_in_turns      # notes/scripts, on the path as a script
from zyfa.activations import make
from zyfa.asm.ptx import attention as attn, kernels, layout, specialized  # noqa: F401 (RESCALE_UNDER_S: the switch this A/B ran with, at 0cd16e0; since removed)
from zyfa.asm.ptx.assemble import assemble
from zyfa.asm.ptx.loader import Kernel

ORIG_LAYOUT, ORIG_ATTENTION = attn.layout_for, kernels._attention
VARIANTS = {"old": (False, 4), "new": (True, 4), "new 6 stages": (True, 6)}
built = {}


def build(variant, rule, causal, dqk, arch, device, packed, long, ref_rule, window=False):
    key = (variant, rule, causal, dqk, packed, long, ref_rule, window)
    if key not in built:
        flag, stages = VARIANTS[variant]
        specialized.RESCALE_UNDER_S = flag

        def layout_for(*a, **kw):
            lay = ORIG_LAYOUT(*a, **kw)
            return dataclasses.replace(lay, stages=stages) if kw.get("long") and lay.is_fp8 else lay
        attn.layout_for = layout_for
        name, ptx = attn.attention_kernel(rule, causal, dqk, arch, packed, long=long, ref_rule=ref_rule, window=window)
        lay = layout_for(dqk, dv=attn.fp8_dv(dqk), packed=packed, long=long)
        built[key] = Kernel(assemble(ptx, arch).cubin, name, torch.device("cuda", device), lay.shared_bytes)
        attn.layout_for = ORIG_LAYOUT
        specialized.RESCALE_UNDER_S = True
    return built[key]


def variant_call(x, variant, long_keys=16384):
    def call():
        kernels._attention = lambda *a: build(variant, *a)
        layout.LONG_KEYS = long_keys
        try:
            return zyfa.flash_attn_func(**x.kwargs(), causal=True, p_rule="exact", backend="ptx", ref_rule="running")
        finally:
            kernels._attention, layout.LONG_KEYS = ORIG_ATTENTION, 16384
    return call



CASES = {"Mistral-7B 16K": (1, 16384, 32, 8, 128, 128), "d128 32 heads 32K": (1, 32768, 32, 32, 128, 128),
         "DeepSeek-V2-Lite 16K": (1, 16384, 16, 16, 192, 128), "d256 batch 4 8K": (4, 8192, 8, 8, 256, 256)}
rows = []
for name, (B, S, Hq, Hkv, D, Dv) in CASES.items():
    q, k, v = make("realistic", B, S, Hq, Hkv, D, Dv, seed=22, device="cuda")
    x = zyfa.quantize_fp8(q, k, v)
    del q, k, v
    calls = {"fa3": fa3_call(x), "old": variant_call(x, "old"), "new": variant_call(x, "new")}
    if D == 128:
        calls["new 6 stages"] = variant_call(x, "new 6 stages")
        calls["serial"] = variant_call(x, "old", long_keys=1 << 30)
    ref = first_out(calls["old"]())
    equal = {k: torch.equal(first_out(f()), ref) for k, f in calls.items() if k not in ("fa3", "old")}
    flops = 2 * B * Hq * (S * (S + 1) / 2) * (D + Dv)
    tf, times = tflops_in_turns(calls, flops)
    rows.append(dict(case=name, equal_to_old=equal, tflops=tf, ms=times))
    print(f"{name:22s} " + " ".join(f"{k} {t:.0f}" for k, t in tf.items()) + " | /fa3 "
          + " ".join(f"{k} {t / tf['fa3']:.3f}" for k, t in tf.items() if k != "fa3")
          + f" | new/old {tf['new'] / tf['old']:.3f} | equal {equal}", flush=True)
    del x, calls
    torch.cuda.empty_cache()
with open(os.path.join(os.environ.get("OUT", "."), "rescale_ab.json"), "w") as fh:
    json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, date=time.strftime("%Y-%m-%d %H:%M UTC",
                   time.gmtime()), rows=rows), fh, indent=1)
