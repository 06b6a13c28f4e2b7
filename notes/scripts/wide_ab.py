"""Lab A/B (not for the package), run 24 (branch fast-wide-tiles): the fast mode's long layout in
224-key blocks and MLA's in 160 (layout.wide_blocks) against 128-key blocks (main), timed in turns (3 rounds)
in one process beside FA3 FP8; the end-to-end error of each (its last 256 query rows against
float64 attention on the BF16 inputs) beside FA3's. Below LONG_KEYS (8K, batch 4 4K) also the long
layout forced (LONG_KEYS 1), wide and not, against the serial kernel those calls take.
As it ran on branch fast-wide-tiles at 4a5c32d; main no longer has d128's 224-key blocks (run 24's decisions)."""
import json
import os
import time

import torch

import zyfa
from ab_common import fa3_call, first_out, tflops_in_turns      # notes/scripts, on the path as a script
from zyfa.activations import make
from zyfa.asm.ptx import attention as attn, kernels, layout
from zyfa.asm.ptx.assemble import assemble
from zyfa.asm.ptx.loader import Kernel
from zyfa.spec.reference import attention_fp64

ORIG_WIDE, ORIG_ATTENTION = attn.wide_blocks, kernels._attention
built = {}


def use(wide: bool):
    attn.wide_blocks = ORIG_WIDE if wide else (lambda *a: False)


def build(wide, rule, causal, dqk, arch, device, packed, long, ref_rule, window=False):
    key = (wide, rule, causal, dqk, packed, long, ref_rule, window)
    if key not in built:
        use(wide)
        name, ptx = attn.attention_kernel(rule, causal, dqk, arch, packed, long=long, ref_rule=ref_rule, window=window)
        lay = attn.layout_for(dqk, dv=attn.fp8_dv(dqk), packed=packed, long=long,
                              wide=attn.wide_blocks(rule, ref_rule, window))
        built[key] = Kernel(assemble(ptx, arch).cubin, name, torch.device("cuda", device), lay.shared_bytes)
    return built[key]


def fast(x, wide, long_keys=layout.LONG_KEYS):
    default_long = layout.LONG_KEYS

    def call():
        use(wide)
        kernels._attention = lambda *a: build(wide, *a)
        layout.LONG_KEYS = long_keys
        try:
            return zyfa.flash_attn_func(**x.kwargs(), causal=True, p_rule="exact", backend="ptx", ref_rule="running")
        finally:
            kernels._attention, layout.LONG_KEYS = ORIG_ATTENTION, default_long
            use(True)
    return call



CASES = {"Mistral-7B 16K": (1, 16384, 32, 8, 128), "d128 32 heads 32K": (1, 32768, 32, 32, 128),
         "DeepSeek-V2-Lite 16K": (1, 16384, 16, 16, 192), "d128 batch 2 16K": (2, 16384, 32, 8, 128),
         "Mistral-7B 8K": (1, 8192, 32, 8, 128), "d128 batch 4 4K": (4, 4096, 32, 32, 128)}
rows = []
for name, (B, S, Hq, Hkv, D) in CASES.items():
    q, k, v = make("realistic", B, S, Hq, Hkv, D, 128, seed=24, device="cuda")
    x = zyfa.quantize_fp8(q, k, v)
    ref = attention_fp64(q[:, -256:], k, v, causal=True)
    calls = {"fa3": fa3_call(x), "fast 128": fast(x, False), "fast 224": fast(x, True)}
    if S < layout.LONG_KEYS and D == 128:                  # "fast 128" / "fast 224" above are the serial kernel here
        calls = {"fa3": calls["fa3"], "serial": calls["fast 128"], "fast 128": fast(x, False, 1),
                 "fast 224": fast(x, True, 1)}
    err = {}
    for key, f in calls.items():
        o = first_out(f())[:, -256:].double()
        err[key] = ((o - ref).norm() / ref.norm()).item()
    del q, k, v, ref
    flops = 2 * B * Hq * (S * (S + 1) / 2) * (D + 128)
    tf, times = tflops_in_turns(calls, flops)
    rows.append(dict(case=name, tflops=tf, ms=times, e2e_err=err))
    print(f"{name:20s} " + " ".join(f"{k} {t:.0f}" for k, t in tf.items())
          + f" | 224/128 {tf['fast 224'] / tf['fast 128']:.3f} 224/fa3 {tf['fast 224'] / tf['fa3']:.3f}"
          + " | e2e/fa3 " + " ".join(f"{k} {e / err['fa3']:.4f}" for k, e in err.items() if k != "fa3"), flush=True)
    del x, calls
    torch.cuda.empty_cache()
with open(os.path.join(os.environ.get("OUT", "."), "wide_ab.json"), "w") as fh:
    json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, date=time.strftime("%Y-%m-%d %H:%M UTC",
                   time.gmtime()), rows=rows), fh, indent=1)
