"""Lab check (not for the package), run 19: the decode kernel after the page rows moved a tile
ahead and the tile stopped following the pages. Dense and paged (16, 48, 64) caches, BF16 and
E4M3 (FP8 dots), batches that split their keys and one that fills the GPU: paged outputs equal
dense bit for bit (the same tile), ``--repeats`` launches each bit for bit. Small enough for
compute-sanitizer:  compute-sanitizer --tool memcheck python3 notes/scripts/decode_repeat.py --repeats 2"""
import argparse

import torch

import zyfa
from zyfa.bench.decode_methods import paged

ap = argparse.ArgumentParser()
ap.add_argument("--repeats", type=int, default=1000)
a = ap.parse_args()
HQ, HKV, D = 32, 8, 128
bad = 0
for B, Sk in ((4, 3000), (2, 9000), (300, 256)):          # splits; splits; fills the GPU (one split)
    g = torch.Generator(device="cuda").manual_seed(B)
    q = torch.randn(B, 1, HQ, D, generator=g, device="cuda").bfloat16()
    k = torch.randn(B, Sk, HKV, D, generator=g, device="cuda").bfloat16()
    v = torch.randn(B, Sk, HKV, D, generator=g, device="cuda").bfloat16()
    lens = torch.randint(Sk // 2, Sk + 1, (B,), generator=g, device="cuda", dtype=torch.int32)
    d = torch.full((B, HKV), 0.05, device="cuda")
    cases = {"bf16": (q, k, v, {}), "fp8": (q, (k.float() / 0.05).to(torch.float8_e4m3fn),
                                            (v.float() / 0.05).to(torch.float8_e4m3fn),
                                            dict(k_descale=d, v_descale=d))}
    for dt, (qq, kk, vv, ds) in cases.items():
        dense = zyfa.flash_attn_with_kvcache(qq, kk, vv, cache_seqlens=lens, causal=True, return_softmax_lse=True, **ds)
        for page in (16, 48, 64):
            Skp = -(-Sk // page) * page
            pad = lambda x: torch.cat([x, x.new_zeros(B, Skp - Sk, *x.shape[2:])], 1)  # noqa: E731
            kp, vp, table = paged(pad(kk), pad(vv), page)
            out = zyfa.flash_attn_with_kvcache(qq, kp, vp, cache_seqlens=lens, page_table=table, causal=True,
                                               return_softmax_lse=True, **ds)
            same = all(torch.equal(x, y) for x, y in zip(out, dense))
            again = all(all(torch.equal(x, y) for x, y in zip(out, zyfa.flash_attn_with_kvcache(
                qq, kp, vp, cache_seqlens=lens, page_table=table, causal=True, return_softmax_lse=True, **ds)))
                        for _ in range(a.repeats))
            bad += not (same and again)
            print(f"{B} x {Sk} {dt} page {page}: paged == dense {same}, {a.repeats} repeats bit for bit {again}",
                  flush=True)
print("FAILED" if bad else "all passed", bad)
