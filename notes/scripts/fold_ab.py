"""Lab A/B (not for the package), run 24 (branch fast-wide-tiles): the default exact path's
pipelined consumer (d128 long, MLA) folding block j - 2's P V^T while S(j) runs
(specialized.FOLD_UNDER_S) against folding block j - 1's after the P V^T wait (old). Timed in
turns (3 rounds) in one process beside FA3 FP8; outputs compared bit for bit.
As it ran on branch fast-wide-tiles at 4a5c32d; main no longer has the FOLD_UNDER_S switch (run 24's decisions)."""
import json
import os
import time

import torch

import zyfa
from ab_common import fa3_call, first_out, tflops_in_turns      # notes/scripts, on the path as a script
from zyfa.activations import make
from zyfa.asm.ptx import attention as attn, kernels, specialized
from zyfa.asm.ptx.assemble import assemble
from zyfa.asm.ptx.loader import Kernel

ORIG_ATTENTION, ORIG_INT8 = kernels._attention, kernels._attention_int8qk
built = {}


def build_int8(flag, rule, causal, dqk, arch, device, window=False):
    key = ("int8", flag, rule, causal, dqk, window)
    if key not in built:
        specialized.FOLD_UNDER_S = flag
        name, ptx = attn.attention_kernel(rule, causal, dqk, arch, int8_qk=True, window=window)
        lay = attn.layout_for(dqk, dv=attn.fp8_dv(dqk), int8_qk=True)
        built[key] = Kernel(assemble(ptx, arch).cubin, name, torch.device("cuda", device), lay.shared_bytes)
        specialized.FOLD_UNDER_S = True
    return built[key]


def build(flag, rule, causal, dqk, arch, device, packed, long, ref_rule, window=False):
    key = (flag, rule, causal, dqk, packed, long, ref_rule, window)
    if key not in built:
        specialized.FOLD_UNDER_S = flag
        name, ptx = attn.attention_kernel(rule, causal, dqk, arch, packed, long=long, ref_rule=ref_rule, window=window)
        lay = attn.layout_for(dqk, dv=attn.fp8_dv(dqk), packed=packed, long=long,
                              wide=attn.wide_blocks(rule, ref_rule, window))
        built[key] = Kernel(assemble(ptx, arch).cubin, name, torch.device("cuda", device), lay.shared_bytes)
        specialized.FOLD_UNDER_S = True
    return built[key]


def default(x, flag):
    def call():
        kernels._attention, kernels._attention_int8qk = (lambda *a: build(flag, *a)), (lambda *a: build_int8(flag, *a))
        try:
            return zyfa.flash_attn_func(**x.kwargs(), causal=True, backend="ptx")
        finally:
            kernels._attention, kernels._attention_int8qk = ORIG_ATTENTION, ORIG_INT8
    return call


CASES = {"Mistral-7B 16K": (1, 16384, 32, 8, 128), "d128 32 heads 32K": (1, 32768, 32, 32, 128),
         "DeepSeek-V2-Lite 16K": (1, 16384, 16, 16, 192)}
rows = []
for name, (B, S, Hq, Hkv, D) in CASES.items():
    q, k, v = make("realistic", B, S, Hq, Hkv, D, 128, seed=25, device="cuda")
    x = zyfa.quantize_fp8(q, k, v)
    xi = zyfa.quantize_int8_qk(q, k, v) if D == 192 else None        # MLA: the INT8 mode's consumer too
    del q, k, v
    calls = {"fa3": fa3_call(x), "old": default(x, False), "new": default(x, True)}
    if xi is not None:
        calls.update({"int8 old": default(xi, False), "int8 new": default(xi, True)})
    equal = torch.equal(first_out(calls["old"]()), first_out(calls["new"]()))
    tf, times = tflops_in_turns(calls, 2 * B * Hq * (S * (S + 1) / 2) * (D + 128))
    rows.append(dict(case=name, bit_equal=equal, tflops=tf, ms=times))
    print(f"{name:22s} " + " ".join(f"{k} {t:.0f}" for k, t in tf.items())
          + f" | new/old {tf['new'] / tf['old']:.3f} new/fa3 {tf['new'] / tf['fa3']:.3f} old/fa3 "
          + f"{tf['old'] / tf['fa3']:.3f} | bit-equal {equal}"
          + (f" | int8 new/old {tf['int8 new'] / tf['int8 old']:.3f} new/fa3 {tf['int8 new'] / tf['fa3']:.3f}"
             if xi is not None else ""), flush=True)
    del x, calls
    torch.cuda.empty_cache()
with open(os.path.join(os.environ.get("OUT", "."), "fold_ab.json"), "w") as fh:
    json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, date=time.strftime("%Y-%m-%d %H:%M UTC",
                   time.gmtime()), rows=rows), fh, indent=1)
