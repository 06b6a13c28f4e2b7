"""Run 58c (session p): is the E4M3 decode rate (~2.55 TB/s for FA3 FP8, the package's kernel and
the Gluon keys-in-M kernel alike, run 58b) set by the cache's layout? A (batch, tokens, kv heads,
128) E4M3 cache puts one head's key in 128 contiguous bytes, 1 KB from the next key's; the BF16
cache's 256 (FA3 BF16 reads at 2.88 TB/s). The same kernels on a head-major cache (batch, kv heads,
tokens, 128) passed as a (batch, tokens, kv heads, 128) view: a head's keys contiguous.

Prediction (before the run): if the 128-byte rows are the limit, head-major reads at 2.8-2.9 TB/s
for every kernel (>= 1.1x FA3 FP8 on the token-major cache); if not, within 3% of token-major.

    OUT=/tmp/out python notes/scripts/decode_layout_ab.py
"""
import json
import os
import sys

import torch
import triton

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "ab", "decode_swap"))
import zyfa  # noqa: E402
# the lab kernel these runs timed left notes when the package took its grown form (zyfa.gluon_kernels,
# 2154e47); to rerun: git show 2154e47:notes/ab/decode_swap/gluon_decode.py > notes/ab/decode_swap/gluon_decode.py
from gluon_decode import gluon_decode  # noqa: E402
from decode_fp8_gpu import _e4m3_head, _fa3  # noqa: E402

DEV, HQ, HKV, D = "cuda", 32, 8, 128


def cache(B, Sk, head_major, gen):
    x8, xd = _e4m3_head(torch.randn(B, Sk, HKV, D, generator=gen, device=DEV))
    if head_major:
        x8 = x8.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)     # same values, a head's keys contiguous
    return x8, xd


def row_width(fa3):
    """Run 59's question (the H100): does a head's key row of 128 bytes, rather than 256, cost the
    bandwidth? BF16 caches at head dim 128 (256-byte rows) and 64 (128-byte rows), the same bytes
    a call (twice the tokens at d64), zyfa's Triton decode and FA3. Prediction if the row width is
    the H100's E4M3 limit: d64 reads at the E4M3 kernels' ~2.55 TB/s, d128 at ~2.85-3.0."""
    rows = []
    for d, Sk in ((128, 8192), (64, 16384)):
        B = 32
        gen = torch.Generator(device=DEV).manual_seed(d)
        q = torch.randn(B, 1, HQ, d, generator=gen, device=DEV).bfloat16()
        k, v = (torch.randn(B, Sk, HKV, d, generator=gen, device=DEV).bfloat16() for _ in range(2))
        sl = torch.full((B,), Sk, dtype=torch.int32, device=DEV)
        nbytes = 2 * k.numel() * 2
        fns = {"zyfa bf16": lambda: zyfa.flash_attn_with_kvcache(q, k, v, cache_seqlens=sl, causal=True)}
        if fa3 is not None:
            fns["fa3 bf16"] = lambda: fa3(q, k, v, cache_seqlens=sl, causal=True)
        for name, fn in fns.items():
            try:
                ms = triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="median")
                rows.append(dict(B=B, Sk=Sk, head_major=False, method=f"{name} d{d} ({2 * d}-byte rows)", ms=ms,
                                 gbps=nbytes / ms / 1e6))
            except Exception as e:  # noqa: BLE001
                rows.append(dict(B=B, Sk=Sk, head_major=False, method=f"{name} d{d}", error=str(e)[:300]))
            print(rows[-1], flush=True)
    return rows


def main():
    fa3 = _fa3()
    rows = []
    for B, Sk in ((32, 8192), (128, 2048), (8, 32768)):
        nbytes = B * Sk * HKV * 2 * D
        sl = torch.full((B,), Sk, dtype=torch.int32, device=DEV)
        for head_major in (False, True):
            gen = torch.Generator(device=DEV).manual_seed(B)
            q8, qd = _e4m3_head(torch.randn(B, 1, HQ, D, generator=gen, device=DEV).view(B, 1, HKV, -1))
            k8, kd = cache(B, Sk, head_major, gen)
            v8, vd = cache(B, Sk, head_major, gen)
            a = dict(q=q8.view(B, 1, HQ, D), k_cache=k8, v_cache=v8, q_descale=qd, k_descale=kd, v_descale=vd)
            splits = 4 if B == 8 else 1
            fns = {"zyfa": lambda: zyfa.flash_attn_with_kvcache(cache_seqlens=sl, causal=True, **a),
                   "gluon n128 s2": lambda: gluon_decode(a["q"], k8, v8, sl, qd, kd, vd, splits=splits, block_n=128,
                                                         stages=2)}
            if fa3 is not None:
                fns["fa3"] = lambda: fa3(cache_seqlens=sl, causal=True, **a)
            ref = None
            for name, fn in fns.items():
                try:
                    o = fn()
                    o = o[0] if isinstance(o, tuple) else o
                    ref = o if ref is None else ref
                    ms = triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="median")
                    rows.append(dict(B=B, Sk=Sk, head_major=head_major, method=name, ms=ms, gbps=nbytes / ms / 1e6,
                                     diff_zyfa=(o.float() - ref.float()).abs().max().item()))
                except Exception as e:  # noqa: BLE001  (record, go on)
                    rows.append(dict(B=B, Sk=Sk, head_major=head_major, method=name, error=str(e)[:300]))
                print(rows[-1], flush=True)
    rows += row_width(fa3)
    os.makedirs(os.environ.get("OUT", "out"), exist_ok=True)
    json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows),
              open(os.path.join(os.environ.get("OUT", "out"), "decode_layout_ab.json"), "w"), indent=1)
    print("\n| B x Sk | layout | method | us | GB/s |")
    for r in rows:
        lay = "head-major" if r["head_major"] else "token-major"
        print(f"| {r['B']} x {r['Sk']} | {lay} | {r['method']} | " +
              (f"{r['ms'] * 1e3:.1f} | {r['gbps']:.0f} |" if "ms" in r else f"error {r['error'][:60]} |"))


if __name__ == "__main__":
    main()
