"""Lab A/B (not for the package): E4M3 decode (FP8 dots) with split counts evened over rounds
of the programs an SM holds and 3 stages for the 128-key tile (new: DecodeTile.per_sm) against
rounds of one program an SM and 2 stages (old), dense and paged 64, at 32 x 8K, 128 x 2K and
8 x 32K (GQA 32/8, d128, one query), timed in turns beside FA3 FP8 in one process."""
import dataclasses
import json
import os

import torch
import triton

import zyfa
from zyfa.bench.decode_methods import paged
from zyfa.triton_kernels import decode_launch

HQ, HKV, D = 32, 8, 128
NEW = decode_launch.default_tile


def OLD(head_dim, page_size, fp8_dot=False):
    t = NEW(head_dim, page_size, fp8_dot)
    return dataclasses.replace(t, num_stages=2, per_sm=1) if fp8_dot else t


def e4m3_head(x):
    d = x.float().abs().amax((1, 3)).clamp_min(1e-6) / 448
    return (x.float() / d[:, None, :, None]).to(torch.float8_e4m3fn), d.contiguous()


def fa3():
    import fa3_fwd_interface
    return fa3_fwd_interface.flash_attn_with_kvcache


ms = lambda fn: triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="median")  # noqa: E731
rows = []
for B, Sk in ((32, 8192), (128, 2048), (8, 32768)):
    g = torch.Generator(device="cuda").manual_seed(B)
    q = torch.randn(B, 1, HQ, D, generator=g, device="cuda").bfloat16()
    k8, kd = e4m3_head(torch.randn(B, Sk, HKV, D, generator=g, device="cuda"))
    v8, vd = e4m3_head(torch.randn(B, Sk, HKV, D, generator=g, device="cuda"))
    q8, qd = e4m3_head(q.view(B, 1, HKV, -1))
    a = dict(q=q8.view(B, 1, HQ, D), k_cache=k8, v_cache=v8, q_descale=qd, k_descale=kd, v_descale=vd)
    lens = torch.full((B,), Sk, dtype=torch.int32, device="cuda")
    kp, vp, table = paged(k8, v8, 64)
    layouts = {"dense": a, "paged64": dict(a, k_cache=kp, v_cache=vp, page_table=table)}
    fns = {}
    for lay, args in layouts.items():
        for tag in ("old", "new"):
            fns[f"{tag} {lay}"] = (tag, lambda args=args: zyfa.flash_attn_with_kvcache(**args, cache_seqlens=lens,
                                                                                      causal=True))
    fns["fa3"] = (None, lambda: fa3()(**a, cache_seqlens=lens, causal=True))
    outs, times = {}, {n: [] for n in fns}
    for _ in range(3):
        for name, (tag, fn) in fns.items():
            decode_launch.default_tile = OLD if tag == "old" else NEW
            o = fn()
            outs[name] = o[0] if isinstance(o, tuple) else o
            times[name].append(ms(fn))
    decode_launch.default_tile = NEW
    nbytes = B * Sk * HKV * 2 * D
    best = {n: min(t) for n, t in times.items()}
    diff = max((outs[f"new {lay}"].float() - outs[f"old {lay}"].float()).abs().max().item() for lay in layouts)
    splits = {tag: decode_launch.decode_splits(B, HKV, Sk, torch.device("cuda"),
                                                per_sm=f(D, 0, True).per_sm) for tag, f in (("old", OLD), ("new", NEW))}
    rows.append(dict(B=B, Sk=Sk, ms=best, gbps={n: nbytes / t / 1e6 for n, t in best.items()}, splits=splits,
                     max_abs_diff_new_old=diff))
    print(f"{B:4d} x {Sk:6d} splits {splits} " + " ".join(f"{n} {nbytes / t / 1e6:.0f}" for n, t in best.items())
          + f" GB/s | new/FA3 dense {best['fa3'] / best['new dense']:.3f} paged {best['fa3'] / best['new paged64']:.3f}"
          + f" | old/FA3 dense {best['fa3'] / best['old dense']:.3f} | paged/dense new {best['new dense'] / best['new paged64']:.3f}"
          + f" | max|new-old| {diff:.1e}", flush=True)
with open(os.path.join(os.environ.get("OUT", "."), "decode_splits_ab.json"), "w") as fh:
    json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), fh, indent=1)
