"""Lab A/B (not for the package), run 26: run 24's two MLA decisions timed again on the final
main, 5 rounds in turns beside FA3 FP8 — the fast mode in 160-key blocks (as main) against 128
(layout.wide_blocks patched off), and the default folding under S (as main) against folding
after the P V^T wait (Layout.fold_under_s patched off); outputs of each pair compared."""
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

ORIG_WIDE, ORIG_FOLD, ORIG_ATTENTION = attn.wide_blocks, layout.Layout.fold_under_s, kernels._attention
built = {}


def patched(old: bool):
    attn.wide_blocks = (lambda *a: False) if old else ORIG_WIDE
    layout.Layout.fold_under_s = property(lambda self: False) if old else ORIG_FOLD


def build(old, rule, causal, dqk, arch, device, packed, long, ref_rule, window=False):
    key = (old, rule, causal, dqk, packed, long, ref_rule, window)
    if key not in built:
        patched(old)
        try:
            name, ptx = attn.attention_kernel(rule, causal, dqk, arch, packed, long=long, ref_rule=ref_rule,
                                              window=window)
            lay = attn.layout_for(dqk, dv=attn.fp8_dv(dqk), packed=packed, long=long,
                                  wide=attn.wide_blocks(rule, ref_rule, window))
            built[key] = Kernel(assemble(ptx, arch).cubin, name, torch.device("cuda", device), lay.shared_bytes)
        finally:
            patched(False)
    return built[key]


def call(x, old, ref_rule):
    def run():
        kernels._attention = lambda *a: build(old, *a)
        attn_wide = attn.wide_blocks
        if old:
            attn.wide_blocks = lambda *a: False           # the host side's layout (TMA boxes) too
        try:
            return zyfa.flash_attn_func(**x.kwargs(), causal=True, backend="ptx", p_rule="exact", ref_rule=ref_rule)
        finally:
            kernels._attention, attn.wide_blocks = ORIG_ATTENTION, attn_wide
    return run


B, S, Hq, Hkv, D = 1, 16384, 16, 16, 192                   # DeepSeek-V2-Lite 16K
q, k, v = make("realistic", B, S, Hq, Hkv, D, 128, seed=26, device="cuda")
x = zyfa.quantize_fp8(q, k, v)
del q, k, v
calls = {"fa3": fa3_call(x), "fast 128": call(x, True, "running"), "fast 160": call(x, False, "running"),
         "default old": call(x, True, "block"), "default fold under S": call(x, False, "block")}
equal = torch.equal(first_out(calls["default old"]()), first_out(calls["default fold under S"]()))
tf, times = tflops_in_turns(calls, 2 * B * Hq * (S * (S + 1) / 2) * (D + 128), rounds=5)
print("DeepSeek-V2-Lite 16K " + " ".join(f"{k} {t:.0f}" for k, t in tf.items())
      + f" | 160/128 {tf['fast 160'] / tf['fast 128']:.3f} 160/fa3 {tf['fast 160'] / tf['fa3']:.3f}"
      + f" | fold new/old {tf['default fold under S'] / tf['default old']:.3f} new/fa3 "
      + f"{tf['default fold under S'] / tf['fa3']:.3f} | default bit-equal {equal}", flush=True)
with open(os.path.join(os.environ.get("OUT", "."), "mla_confirm.json"), "w") as fh:
    json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, date=time.strftime("%Y-%m-%d %H:%M UTC",
                   time.gmtime()), case="DeepSeek-V2-Lite 16K", tflops=tf, ms=times, default_bit_equal=equal), fh, indent=1)
