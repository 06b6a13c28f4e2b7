"""Lab A/B (not for the package): paged decode tiles after each tile's page rows are read a tile
ahead (runs 16-17), beside the dense cache and FA3 (FP8 and BF16, dense; FA3's wheel has no paged
KV), in turns in one process. GQA 32/8, d128, one query, causal, at 32 x 8K, 128 x 2K, 8 x 32K.
Variants: the tile (keys / stages / programs an SM) and the page lookups (pages_a_tile: one a
tile, two, or one a key, forced by patching decode_launch.pages_a_tile)."""
import json
import os

import torch
import triton

from zyfa.bench.decode_methods import paged
from zyfa.triton_kernels import decode_launch
from zyfa.triton_kernels.decode_launch import DecodeTile, triton_decode

HQ, HKV, D = 32, 8, 128
LOOKUPS = decode_launch.pages_a_tile
ms = lambda fn: triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="median")  # noqa: E731
T128, T64S3, B64 = DecodeTile(128, 4, 3, per_sm=2), DecodeTile(64, 4, 3, per_sm=3), DecodeTile(64, 4, 2)
# name: (dtype, page, tile (None: default_tile), a lookup a key forced)
VARIANTS = {"fp8 dense": ("fp8", 0, None, False), "fp8 dense t64s3": ("fp8", 0, T64S3, False),
            "fp8 p64 t64s3": ("fp8", 64, T64S3, False), "fp8 p64 t128": ("fp8", 64, T128, False),
            "fp8 p16 t128": ("fp8", 16, T128, False), "fp8 p16 t64s3": ("fp8", 16, T64S3, False),
            "fp8 p16 t64s3 perkey": ("fp8", 16, T64S3, True), "fp8 p32 t64s3": ("fp8", 32, T64S3, False),
            "fp8 p128 t128": ("fp8", 128, T128, False),
            "bf16 dense": ("bf16", 0, None, False), "bf16 p16 t64": ("bf16", 16, B64, False),
            "bf16 p16 t64 perkey": ("bf16", 16, B64, True), "bf16 p32 t64": ("bf16", 32, B64, False),
            "bf16 p64": ("bf16", 64, B64, False)}


def e4m3_head(x):
    d = x.float().abs().amax((1, 3)).clamp_min(1e-6) / 448
    return (x.float() / d[:, None, :, None]).to(torch.float8_e4m3fn), d.contiguous()


def call(args, tile, per_key):
    decode_launch.pages_a_tile = (lambda page, block_n: 0) if per_key else LOOKUPS
    try:
        return triton_decode(*args[0], tile=tile, **args[1])
    finally:
        decode_launch.pages_a_tile = LOOKUPS


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
    src = {"fp8": (q8, k8, v8, f8), "bf16": (q, k, v, {})}
    pools = {}
    calls = {}
    for name, (dt, page, tile, per_key) in VARIANTS.items():
        qq, kk, vv, ds = src[dt]
        if page and (dt, page) not in pools:
            pools[dt, page] = paged(kk, vv, page)
        kc, vc, table = pools[dt, page] if page else (kk, vv, None)
        args = ((qq, kc, vc, lens), dict(block_table=table, causal=True, **ds))
        calls[name] = lambda args=args, tile=tile, per_key=per_key: call(args, tile, per_key)
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
    # a paged variant with the dense tile reads the same keys in the same tiles and splits
    same = {n: bool(torch.equal(outs[n], outs[n.split()[0] + " dense"])) for n in VARIANTS
            if VARIANTS[n][1] and VARIANTS[n][2] in (T128, B64)}
    same.update({n: bool(torch.equal(outs[n], outs["fp8 dense t64s3"])) for n in VARIANTS
                 if VARIANTS[n][1] and VARIANTS[n][2] == T64S3})
    rows.append(dict(B=B, Sk=Sk, ms=best, gbps=gbps, bitwise_equal_dense=same))
    print(f"{B} x {Sk}: " + " | ".join(f"{n} {gbps[n]:.0f}" for n in calls), flush=True)
    for dt in ("fp8", "bf16"):
        print(f"   {dt}: dense/FA3 {best[f'fa3 {dt}'] / best[f'{dt} dense']:.3f} | " + " ".join(
            f"{n.split(' ', 1)[1]} {best[f'{dt} dense'] / best[n]:.3f}" for n in VARIANTS
            if n.startswith(dt) and VARIANTS[n][1]) + " (of dense)", flush=True)
    print("   bitwise equal to dense:", same, flush=True)
with open(os.path.join(os.environ.get("OUT", "."), "paged_tile_ab.json"), "w") as fh:
    json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                   rows=rows), fh, indent=1)
