"""Lab A/B (not for the package): paged decode with the dense cache's key tile, a page lookup a
key (TILE_IN_PAGE false), against today's tile shrunk to the page (one lookup a tile), beside the
dense cache and FA3 (FP8 and BF16, dense; FA3's wheel has no paged KV), in turns in one process.
GQA 32/8, d128, one query, causal, at 32 x 8K, 128 x 2K, 8 x 32K."""
import json
import os

import torch
import triton

from zyfa.bench.decode_methods import paged
from zyfa.triton_kernels.decode_launch import default_tile, triton_decode

HQ, HKV, D = 32, 8, 128
ms = lambda fn: triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="median")  # noqa: E731


def e4m3_head(x):
    d = x.float().abs().amax((1, 3)).clamp_min(1e-6) / 448
    return (x.float() / d[:, None, :, None]).to(torch.float8_e4m3fn), d.contiguous()


import fa3_fwd_interface  # noqa: E402
fa3 = fa3_fwd_interface.flash_attn_with_kvcache
rows = []
for B, Sk in ((32, 8192), (128, 2048), (8, 32768)):
    g = torch.Generator(device="cuda").manual_seed(B)
    q = torch.randn(B, 1, HQ, D, generator=g, device="cuda").bfloat16()
    k = torch.randn(B, Sk, HKV, D, generator=g, device="cuda").bfloat16()
    v = torch.randn(B, Sk, HKV, D, generator=g, device="cuda").bfloat16()
    k8, kd = e4m3_head(k)
    v8, vd = e4m3_head(v)
    q8, qd = e4m3_head(q.view(B, 1, HKV, -1))
    q8 = q8.view(B, 1, HQ, D)
    lens = torch.full((B,), Sk, dtype=torch.int32, device="cuda")
    f8 = dict(q_descale=qd, k_descale=kd, v_descale=vd)
    fns = {}
    for dt, (qq, kk, vv, ds) in {"fp8": (q8, k8, v8, f8), "bf16": (q, k, v, {})}.items():
        dense_tile = default_tile(D, 0, dt == "fp8")
        fns[f"{dt} dense"] = (kk, vv, None, qq, ds, None)
        for page in (16, 64):
            kp, vp, table = paged(kk, vv, page)
            fns[f"{dt} p{page} now"] = (kp, vp, table, qq, ds, None)
            fns[f"{dt} p{page} dense-tile"] = (kp, vp, table, qq, ds, dense_tile)
    calls = {n: (lambda a=a: triton_decode(a[3], a[0], a[1], lens, block_table=a[2], causal=True, tile=a[5], **a[4]))
             for n, a in fns.items()}
    calls["fa3 fp8"] = lambda: fa3(q8, k8, v8, cache_seqlens=lens, causal=True, **f8)
    calls["fa3 bf16"] = lambda: fa3(q, k, v, cache_seqlens=lens, causal=True)
    outs, times = {}, {n: [] for n in calls}
    for _ in range(3):
        for name, fn in calls.items():
            o = fn()
            outs[name] = o[0] if isinstance(o, tuple) else o
            times[name].append(ms(fn))
    best = {n: min(t) for n, t in times.items()}
    gbps = {n: B * Sk * HKV * D * 2 * (1 if "fp8" in n else 2) / t / 1e6 for n, t in best.items()}
    # the paged dense-tile kernel reads the same keys in the same tiles and splits as the dense one
    same = {n: bool(torch.equal(outs[n], outs[n.split()[0] + " dense"])) for n in outs if "dense-tile" in n}
    rows.append(dict(B=B, Sk=Sk, ms=best, gbps=gbps, bitwise_equal_dense=same))
    print(f"{B} x {Sk}: " + " | ".join(f"{n} {gbps[n]:.0f}" for n in calls), flush=True)
    for dt in ("fp8", "bf16"):
        print(f"   {dt}: dense/FA3 {best[f'fa3 {dt}'] / best[f'{dt} dense']:.3f} " + " ".join(
            f"{n.split(' ', 1)[1]}/dense {best[f'{dt} dense'] / best[n]:.3f}" for n in calls
            if n.startswith(dt) and "p" in n.split()[1]) + f" bitwise {same}", flush=True)
with open(os.path.join(os.environ.get("OUT", "."), "paged_tile_ab.json"), "w") as fh:
    json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                   rows=rows), fh, indent=1)
