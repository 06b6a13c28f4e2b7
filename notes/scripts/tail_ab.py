"""Lab A/B (not for the package), run 27 (branch mla-tail-box): MLA's fast mode (160-key blocks)
with its V^T in 32-key boxes (layout.V_BOX_32: 20 KB a stage, no key past the block loaded) in
three and four stages (layout.WIDE_STAGES) against two 128-key boxes in three stages (main),
timed in turns (5 rounds) in one process beside FA3 FP8; outputs compared bit for bit (the same
arithmetic, only the loads differ)."""
import json
import os
import time

import torch

import zyfa
from ab_common import fa3_call, first_out, ptx_variant, tflops_in_turns      # notes/scripts, on the path as a script
from zyfa.activations import make
from zyfa.asm.ptx import layout

VARIANTS = {"128-key boxes, 3 stages": (False, 3), "32-key boxes, 3 stages": (True, 3),
            "32-key boxes, 4 stages": (True, 4)}


def use(variant):
    layout.V_BOX_32, layout.WIDE_STAGES = VARIANTS[variant]
    layout.layout_for.cache_clear()


built = {}


def fast(x, variant):
    return ptx_variant(use, variant, x, built, causal=True, p_rule="exact", ref_rule="running")


CASES = {"DeepSeek-V2-Lite 16K": (1, 16384, 16, 16), "MLA 32 heads 8K": (1, 8192, 32, 32),
         "MLA batch 2 16K": (2, 16384, 16, 16)}
rows = []
for name, (B, S, Hq, Hkv) in CASES.items():
    q, k, v = make("realistic", B, S, Hq, Hkv, 192, 128, seed=27, device="cuda")
    x = zyfa.quantize_fp8(q, k, v)
    del q, k, v
    calls = {"fa3": fa3_call(x), **{v: fast(x, v) for v in VARIANTS}}
    outs = {v: first_out(calls[v]()) for v in VARIANTS}
    base = outs["128-key boxes, 3 stages"]
    equal = {v: torch.equal(o, base) for v, o in outs.items()}
    del outs, base
    tf, times = tflops_in_turns(calls, 2 * B * Hq * (S * (S + 1) / 2) * (192 + 128), rounds=5)
    rows.append(dict(case=name, tflops=tf, ms=times, bit_equal=equal))
    old = tf["128-key boxes, 3 stages"]
    print(f"{name:22s} " + " | ".join(f"{v} {t:.0f} ({t / old:.3f}, {t / tf['fa3']:.3f}x fa3)" for v, t in tf.items()
                                      if v != "fa3") + f" | fa3 {tf['fa3']:.0f} | bit-equal {all(equal.values())}",
          flush=True)
    del x, calls
    torch.cuda.empty_cache()
with open(os.path.join(os.environ.get("OUT", "."), "tail_ab.json"), "w") as fh:
    json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, date=time.strftime("%Y-%m-%d %H:%M UTC",
                   time.gmtime()), rows=rows), fh, indent=1)
