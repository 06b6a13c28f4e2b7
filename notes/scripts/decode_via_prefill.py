"""Lab (not for the package), for session j: is the generated serial prefill kernel, given a GQA
group's heads as its query rows, a fast E4M3 decode kernel — before building its in-kernel V
transpose (branch decode-ptx)? One-query decode at 32 x 8K and 128 x 2K (GQA 32/8, d128):

  q (B, 1, 32, 128) viewed without a copy as (B, G = 4, 8, 128) (row g of kv head h is query head
  h G + g), run non-causal (one query sees every key) through zyfa.flash_attn_func on the PTX
  backend, with V stored as V^T (quantize_fp8's layout: read where it lies, the slot-order K, no
  rewrite) — so the figure is what the kernel streams when V^T costs nothing, the bound of the
  serial kernel plus an in-kernel transpose. Beside it in one process: FA3's
  flash_attn_with_kvcache FP8, zyfa's Triton decode kernel, a device copy (GB/s of K + V).
No key split: 8 x 32K (64 CTAs, and the long layout's V^T rewrite) is left out."""
import os
import sys

import torch
import triton

import zyfa

sys.path.insert(0, os.path.dirname(__file__))
from decode_fp8_gpu import _fa3  # noqa: E402  (notes/scripts)

HQ, HKV, D = 32, 8, 128
G = HQ // HKV


def e4m3(x, dims):
    """x as E4M3 with a descale per the remaining dims (the max over ``dims`` / 448)."""
    d = x.float().abs().amax(dims, keepdim=True).clamp_min(1e-6) / 448
    return (x.float() / d).to(torch.float8_e4m3fn), d


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


fa3 = _fa3()
print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, "fa3" if fa3 else "no fa3")
for B, Sk in ((32, 8192), (128, 2048)):
    g = torch.Generator(device="cuda").manual_seed(B)
    q = torch.randn(B, 1, HQ, D, device="cuda", generator=g, dtype=torch.bfloat16)
    k = torch.randn(B, Sk, HKV, D, device="cuda", generator=g, dtype=torch.bfloat16)
    v = torch.randn(B, Sk, HKV, D, device="cuda", generator=g, dtype=torch.bfloat16)
    # one q descale a (sequence, kv head): the prefill kernel's factor is a (batch, head) one
    q8, qd = e4m3(q.view(B, 1, HKV, G, D), (1, 3, 4))
    q8, qd = q8.view(B, 1, HQ, D), qd.view(B, HKV)
    k8, kd = e4m3(k, (1, 3))
    v8, vd = e4m3(v, (1, 3))
    kd, vd = kd.view(B, HKV), vd.view(B, HKV)
    vt = v8.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)          # stored as V^T, seen as (B, Sk, Hkv, D)
    qp = q8.as_strided((B, G, HKV, D), (HQ * D, D, G * D, 1))
    qd_rows = qd                                                           # (B, Hkv): the rows' heads share it

    def prefill_as_decode(v_in):
        out, lse = zyfa.flash_attn_func(qp, k8, v_in, causal=False, backend="ptx", p_rule="exact", ref_rule="running",
                                        q_descale=qd_rows, k_descale=kd, v_descale=vd, return_lse=True)
        return out.permute(0, 2, 1, 3).reshape(B, 1, HQ, D)

    lens = torch.full((B,), Sk, dtype=torch.int32, device="cuda")
    calls = {"prefill kernel as decode": lambda: prefill_as_decode(vt),
             "same, V key-major (rewrite)": lambda: prefill_as_decode(v8),       # what runs today: V^T rewritten a call
             "zyfa decode (Triton)": lambda: zyfa.flash_attn_with_kvcache(q8, k8, v8, cache_seqlens=lens, causal=True,
                                                                           q_descale=qd, k_descale=kd, v_descale=vd)}
    if fa3 is not None:
        calls["FA3 FP8"] = lambda: fa3(q8, k8, v8, cache_seqlens=lens, causal=True, q_descale=qd,
                                       k_descale=kd, v_descale=vd)
    dk, dv = torch.empty_like(k8), torch.empty_like(v8)
    calls["copy (read + write)"] = lambda: (dk.copy_(k8), dv.copy_(v8))
    first = {n: f() for n, f in calls.items()}
    base = first["zyfa decode (Triton)"]
    base = base[0] if isinstance(base, tuple) else base
    nbytes = 2 * B * Sk * HKV * D
    for n, f in calls.items():
        ms = min(triton.testing.do_bench(f, warmup=20, rep=200, return_mode="median") for _ in range(3))
        gbps = nbytes * (2 if n.startswith("copy") else 1) / ms / 1e6
        out = first[n][0] if isinstance(first[n], tuple) else first[n]
        diff = "" if n.startswith("copy") else f", vs Triton decode {rel(out, base):.1e}"
        print(f"{B:4d} x {Sk:5d} {n:26s} {ms * 1e3:7.1f} us {gbps:6.0f} GB/s{diff}", flush=True)
