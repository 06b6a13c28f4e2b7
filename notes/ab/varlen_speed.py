"""Packed (varlen) batches on the GPU: zyfa's one-launch paths (the Triton kernel, the generated
Hopper kernels), one call a sequence, paged caches, and FlashAttention-3's varlen function, in
one process.

    python notes/ab/varlen_speed.py [--out results.json]

A batch of sequences with seeded random lengths (causal, GQA 32/8, d128, realistic values);
FLOPs count each sequence's causal pairs exactly. Each zyfa output is checked against the
per-sequence calls (the same kernel: equal where the tiles agree) and, on the last rows of the
longest sequence, against float64.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import torch  # noqa: E402

import zyfa  # noqa: E402
from zyfa.activations import make  # noqa: E402
from zyfa.bench.measure import median_ms, rel_err  # noqa: E402
from zyfa.spec.reference import attention_fp64  # noqa: E402
from zyfa.varlen import paged_kv_cache  # noqa: E402

BATCHES = {"32 x 64..2048": (32, 64, 2048), "128 x 16..512": (128, 16, 512), "8 x 1K..8K": (8, 1024, 8192)}
HQ, HKV, D = 32, 8, 128
PAGE_SIZES = (64, 128)


def _batch(n, lo, hi, seed=0):
    rng = random.Random(seed)
    lens = [rng.randint(lo, hi) for _ in range(n)]
    q, k, v = (t.bfloat16()[0] for t in make("realistic", 1, sum(lens), HQ, HKV, D, seed=seed, device="cuda"))
    return lens, q, k, v


def _flops(lens):
    return sum(2 * HQ * (n * (n + 1) // 2) * 2 * D for n in lens)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    try:
        import fa3_fwd_interface as fa3
    except ImportError:
        fa3 = None
    rows = []
    for name, (n, lo, hi) in BATCHES.items():
        lens, q, k, v = _batch(n, lo, hi)
        cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
        mx = max(lens)
        starts = cu.tolist()[:-1]
        x = zyfa.quantize_fp8(q[None], k[None], v[None])
        fp8 = dict(q=x.q[0], k=x.k[0], v=x.v[0], q_descale=x.q_descale.expand(n, HKV).contiguous(),
                   k_descale=x.k_descale.expand(n, HKV).contiguous(), v_descale=x.v_descale.expand(n, HKV).contiguous())
        calls = {
            "zyfa-bf16 one launch": lambda: zyfa.flash_attn_varlen_func(q, k, v, cu, cu, mx, mx, causal=True, backend="triton"),
            "zyfa-fp8 one launch": lambda: zyfa.flash_attn_varlen_func(causal=True, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=mx,
                                                                       max_seqlen_k=mx, backend="triton", **fp8),
            "zyfa-bf16 a call a sequence": lambda: torch.cat(
                [zyfa.flash_attn_func(q[None, c:c + m], k[None, c:c + m], v[None, c:c + m], causal=True, backend="triton")[0]
                 for c, m in zip(starts, lens)]),
            "zyfa-fp8 ptx one launch": lambda: zyfa.flash_attn_varlen_func(
                causal=True, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=mx, max_seqlen_k=mx, backend="ptx", **fp8),
            "zyfa-bf16 ptx one launch": lambda: zyfa.flash_attn_varlen_func(q, k, v, cu, cu, mx, mx, causal=True, backend="ptx"),
            "zyfa-fp8 ptx a call a sequence": lambda: torch.cat(
                [zyfa.flash_attn_func(x.q[:, c:c + m], x.k[:, c:c + m], x.v[:, c:c + m], causal=True, backend="ptx",
                                      **{n_: fp8[n_][i:i + 1] for n_ in ("q_descale", "k_descale", "v_descale")})[0]
                 for i, (c, m) in enumerate(zip(starts, lens))]),
        }
        for page in PAGE_SIZES:     # the same batch from a paged cache: Triton reads pages of a multiple of its
            # tile in place (others gathered first); the generated kernel always takes them gathered
            kp, vp, table, used = paged_kv_cache(k, v, cu, page, seed=page)
            calls[f"zyfa-bf16 paged {page}"] = (lambda kp=kp, vp=vp, table=table, used=used: zyfa.flash_attn_varlen_func(
                q, kp, vp, cu, None, mx, mx, causal=True, block_table=table, seqused_k=used, backend="triton"))
            kp8, vp8, table8, used8 = paged_kv_cache(x.k[0], x.v[0], cu, page, seed=page)
            f8 = {n_: t for n_, t in fp8.items() if n_ not in ("k", "v")}
            calls[f"zyfa-fp8 paged {page}"] = (lambda kp=kp8, vp=vp8, table=table8, used=used8: zyfa.flash_attn_varlen_func(
                causal=True, k=kp, v=vp, cu_seqlens_q=cu, cu_seqlens_k=None, max_seqlen_q=mx, max_seqlen_k=mx, block_table=table,
                seqused_k=used, backend="triton", **f8))
            calls[f"zyfa-bf16 ptx paged {page}"] = (lambda kp=kp, vp=vp, table=table, used=used: zyfa.flash_attn_varlen_func(
                q, kp, vp, cu, None, mx, mx, causal=True, block_table=table, seqused_k=used, backend="ptx"))
            calls[f"zyfa-fp8 ptx paged {page}"] = (lambda kp=kp8, vp=vp8, table=table8, used=used8: zyfa.flash_attn_varlen_func(
                causal=True, k=kp, v=vp, cu_seqlens_q=cu, cu_seqlens_k=None, max_seqlen_q=mx, max_seqlen_k=mx, block_table=table,
                seqused_k=used, backend="ptx", **f8))
        if fa3 is not None:
            v8 = x.v[0].contiguous()
            calls["fa3-bf16"] = lambda: fa3.flash_attn_varlen_func(q, k, v, cu, cu, mx, mx, causal=True)
            calls["fa3-fp8"] = lambda: fa3.flash_attn_varlen_func(
                x.q[0], x.k[0], v8, cu, cu, mx, mx, causal=True, q_descale=fp8["q_descale"],
                k_descale=fp8["k_descale"], v_descale=fp8["v_descale"])
        # float64 on the last 256 rows of the longest sequence
        i = lens.index(mx)
        s0 = sum(lens[:i])
        rows_ = slice(s0 + mx - 256, s0 + mx)
        ref = attention_fp64(q[None, rows_], k[None, s0:s0 + mx], v[None, s0:s0 + mx])[0]
        dense_bf16 = torch.cat([zyfa.flash_attn_func(q[None, c:c + m], k[None, c:c + m], v[None, c:c + m],
                                                     causal=True, backend="triton")[0]
                                for c, m in zip(starts, lens)])
        for label, fn in calls.items():
            out = fn()
            out = out[0] if isinstance(out, tuple) else out
            rec = dict(batch=name, label=label, sequences=n, tokens=sum(lens), err_fp64_last_rows=rel_err(out[rows_], ref))
            if label in ("zyfa-bf16 one launch", "zyfa-bf16 ptx one launch"):
                per_seq = dense_bf16 if "ptx" not in label else torch.cat(
                    [zyfa.flash_attn_func(q[None, c:c + m], k[None, c:c + m], v[None, c:c + m], causal=True, backend="ptx")[0]
                     for c, m in zip(starts, lens)])
                rec["equals_per_sequence_calls"] = bool(torch.equal(out, per_seq))
            if label == "zyfa-fp8 ptx one launch":
                rec["equals_per_sequence_calls"] = bool(torch.equal(out, calls["zyfa-fp8 ptx a call a sequence"]()))
            if " paged " in label:        # the contiguous one-launch call on the same batch
                contiguous = calls[label.split(" paged ")[0] + " one launch"]()
                rec["equals_contiguous"] = bool(torch.equal(out, contiguous))
            ms = median_ms(fn)
            rec.update(ms=ms, tflops=_flops(lens) / ms / 1e9)
            rows.append(rec)
            print(f"{name:16s} {label:40s} {ms:8.3f} ms {rec['tflops']:6.0f} TFLOP/s err {rec['err_fp64_last_rows']:.2e}"
                  + "".join(f" {k_}: {rec[k_]}" for k_ in ("equals_per_sequence_calls", "equals_contiguous") if k_ in rec),
                  flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
