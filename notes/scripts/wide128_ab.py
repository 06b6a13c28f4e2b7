"""Lab A/B (not for the package), run 29 (branch d128-wide): the fast mode's long d128 layout
(exact rule, running reference, from 16K keys) in key blocks of 128 (main), 192 and 224
(layout.LONG_WIDE_KEYS; V^T in 32-key boxes, no key past the block loaded) and stages
(LONG_WIDE_STAGES), timed in turns (5 rounds) in one process beside FA3 FP8. A wider block moves
the running reference less often: outputs differ from the 128-key kernel's by the P rounding;
the max difference is printed as a sanity check (each block is held to the spec by the GPU tests)."""
import json
import os
import time

import torch

import zyfa
from ab_common import fa3_call, first_out, ptx_variant, tflops_in_turns      # notes/scripts, on the path as a script
from zyfa.activations import make
from zyfa.asm.ptx import layout

VARIANTS = {"128 keys, 4 stages": (128, 4), "192 keys, 4 stages": (192, 4), "192 keys, 3 stages": (192, 3),
            "224 keys, 3 stages": (224, 3)}


def use(variant):
    layout.LONG_WIDE_KEYS, layout.LONG_WIDE_STAGES = VARIANTS[variant]
    layout.layout_for.cache_clear()


built = {}


def fast(x, variant):
    return ptx_variant(use, variant, x, built, causal=True, p_rule="exact", ref_rule="running")


CASES = {"Mistral-7B 16K": (1, 16384, 32, 8), "d128 32 heads 32K": (1, 32768, 32, 32),
         "d128 batch 2 16K": (2, 16384, 32, 8)}
rows = []
for name, (B, S, Hq, Hkv) in CASES.items():
    q, k, v = make("realistic", B, S, Hq, Hkv, 128, 128, seed=29, device="cuda")
    x = zyfa.quantize_fp8(q, k, v)
    del q, k, v
    calls = {"fa3": fa3_call(x), **{v: fast(x, v) for v in VARIANTS}}
    outs = {v: first_out(calls[v]()).float() for v in VARIANTS}
    base = outs["128 keys, 4 stages"]
    diff = {v: (o - base).abs().max().item() for v, o in outs.items()}
    del outs, base
    tf, times = tflops_in_turns(calls, 2 * B * Hq * (S * (S + 1) / 2) * (128 + 128), rounds=5)
    rows.append(dict(case=name, tflops=tf, ms=times, max_diff_vs_128=diff))
    old = tf["128 keys, 4 stages"]
    print(f"{name:18s} " + " | ".join(f"{v} {t:.0f} ({t / old:.3f}, {t / tf['fa3']:.3f}x fa3, diff {diff[v]:.1e})"
                                      for v, t in tf.items() if v != "fa3") + f" | fa3 {tf['fa3']:.0f}", flush=True)
    del x, calls
    torch.cuda.empty_cache()
with open(os.path.join(os.environ.get("OUT", "."), "wide128_ab.json"), "w") as fh:
    json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, date=time.strftime("%Y-%m-%d %H:%M UTC",
                   time.gmtime()), rows=rows), fh, indent=1)
