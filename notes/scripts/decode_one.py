"""Lab (not for the package), for the session after j: one-query E4M3 decode at 32 x 8K (GQA
32/8, d128), two launches (a warm-up, then the one Nsight Compute profiles) of the serial
prefill kernel as a decode kernel (V^T read in place, run 41's "prefill kernel as decode"),
zyfa's Triton decode kernel, and FA3 FP8 — to see what holds all three at ~2.5 TB/s (86% of
the copy's figure) where a read should reach ~2.9: DRAM throughput, bytes in flight (achieved
occupancy, outstanding loads), warp stalls. notes/scripts/decode_profile.sh runs it under ncu."""
import os
import sys

import torch

import zyfa

sys.path.insert(0, os.path.dirname(__file__))
from decode_fp8_gpu import _fa3  # noqa: E402  (notes/scripts)

B, SK, HQ, HKV, D = 32, 8192, 32, 8, 128
G = HQ // HKV
which = sys.argv[1]
g = torch.Generator(device="cuda").manual_seed(B)
q = torch.randn(B, 1, HQ, D, device="cuda", generator=g, dtype=torch.bfloat16)
k = torch.randn(B, SK, HKV, D, device="cuda", generator=g, dtype=torch.bfloat16)
v = torch.randn(B, SK, HKV, D, device="cuda", generator=g, dtype=torch.bfloat16)


def e4m3(x, dims):
    d = x.float().abs().amax(dims, keepdim=True).clamp_min(1e-6) / 448
    return (x.float() / d).to(torch.float8_e4m3fn), d


q8, qd = e4m3(q.view(B, 1, HKV, G, D), (1, 3, 4))
q8, qd = q8.view(B, 1, HQ, D), qd.view(B, HKV)
k8, kd = e4m3(k, (1, 3))
v8, vd = e4m3(v, (1, 3))
kd, vd = kd.view(B, HKV), vd.view(B, HKV)
lens = torch.full((B,), SK, dtype=torch.int32, device="cuda")
if which == "prefill":
    vt = v8.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    qp = q8.as_strided((B, G, HKV, D), (HQ * D, D, G * D, 1))
    call = lambda: zyfa.flash_attn_func(qp, k8, vt, causal=False, backend="ptx", p_rule="exact",  # noqa: E731
                                        ref_rule="running", q_descale=qd, k_descale=kd, v_descale=vd)
elif which == "triton":
    call = lambda: zyfa.flash_attn_with_kvcache(q8, k8, v8, cache_seqlens=lens, causal=True,  # noqa: E731
                                                q_descale=qd, k_descale=kd, v_descale=vd)
else:
    fa3 = _fa3()
    call = lambda: fa3(q8, k8, v8, cache_seqlens=lens, causal=True, q_descale=qd, k_descale=kd,  # noqa: E731
                       v_descale=vd)
for _ in range(2):
    call()
torch.cuda.synchronize()
