"""Lab profile (not for the package): one fast-mode, one default exact and one FA3 FP8 launch at
Mistral-7B 16K (GQA 32/8, d128, causal) inside NVTX ranges, for ncu --nvtx-include.

    ncu --clock-control none --nvtx --nvtx-include "fast/" ... python notes/scripts/profile_fast.py fast
"""
import sys

import torch

import zyfa
from zyfa.activations import make

which = sys.argv[1]
B, S, Hq, Hkv, D, Dv = {"mistral": (1, 16384, 32, 8, 128, 128), "deepseek": (1, 16384, 16, 16, 192, 128),
                        "b4": (4, 4096, 32, 32, 128, 128)}[sys.argv[2] if len(sys.argv) > 2 else "mistral"]
q, k, v = make("realistic", B, S, Hq, Hkv, D, Dv, seed=11, device="cuda")
x = zyfa.quantize_fp8(q, k, v)
if which == "fa3":
    import fa3_fwd_interface
    vc = x.v.contiguous()
    fn = lambda: fa3_fwd_interface.flash_attn_func(x.q, x.k, vc, causal=True, q_descale=x.q_descale,  # noqa: E731
                                                   k_descale=x.k_descale, v_descale=x.v_descale)
else:
    extra = dict(ref_rule="running") if which == "fast" else {}
    fn = lambda: zyfa.flash_attn_func(**x.kwargs(), causal=True, p_rule="exact", backend="ptx", **extra)  # noqa: E731
for _ in range(3):
    fn()
torch.cuda.synchronize()
torch.cuda.nvtx.range_push(which)
fn()
torch.cuda.synchronize()
torch.cuda.nvtx.range_pop()
print(which, "done")
