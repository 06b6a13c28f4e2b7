"""Where a fused quantizer's time goes (default shape Mistral-7B 16K: GQA 32/8, d128, realistic BF16).

    python notes/ab/quantizer_profile.py [OUT.json] [--shape B,S,Hq,Hkv,D[,Dv] ...] [--only NAME,...]

For quantize_fp8 (plain, hadamard, smooth_k + hadamard) and quantize_int8_qk (default, without
smoothing, without rotation, neither): the call's median time (triton's do_bench, L2 cleared
before each run), the host's own time a call (20 calls queued behind a sleeping kernel, so
the GPU never waits for them), and torch.profiler's device time per kernel. A call whose time
is its host time is host-bound; one whose time is its kernels' is device-bound.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import torch  # noqa: E402

import zyfa  # noqa: E402
from zyfa.activations import make  # noqa: E402
from zyfa.bench.measure import host_ms, kernel_ms, median_ms  # noqa: E402


def kernels_ms(fn, calls: int = 10) -> dict:
    """Device time a call per kernel name (first 60 characters)."""
    return {name[:60]: round(ms, 4) for name, ms in kernel_ms(fn, calls).items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=None)
    ap.add_argument("--shape", action="append", default=None, help="B,S,Hq,Hkv,D[,Dv] (repeatable)")
    ap.add_argument("--only", default=None, help="comma-separated variant names")
    a = ap.parse_args(argv)
    out = {}
    for shape in a.shape or ["1,16384,32,8,128"]:
        dims = [int(n) for n in shape.split(",")]
        print(f"shape B,S,Hq,Hkv,D,Dv = {dims}")
        out[shape] = profile_shape(*dims, only=a.only.split(",") if a.only else None)
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


def profile_shape(B, S, Hq, Hkv, D, Dv=None, only=None) -> dict:
    q, k, v = (t.bfloat16() for t in make("realistic", B, S, Hq, Hkv, D, Dv, seed=1, device="cuda"))
    elems = q.numel() + k.numel() + v.numel()
    dst = [torch.empty_like(t) for t in (q, k, v)]

    def copy():
        for d, s in zip(dst, (q, k, v)):
            d.copy_(s)
    out = {"copy_ms": median_ms(copy)}
    print(f"copy {out['copy_ms']:.3f} ms, {elems * 4 / out['copy_ms'] / 1e6:.0f} GB/s (2 bytes read + 2 written)")
    variants = {
        "fp8 plain": dict(fn=zyfa.quantize_fp8),
        "fp8 had": dict(fn=zyfa.quantize_fp8, hadamard=True),
        "fp8 smooth+had": dict(fn=zyfa.quantize_fp8, hadamard=True, smooth_k=True),
        "int8 default": dict(fn=zyfa.quantize_int8_qk),
        "int8 no smooth": dict(fn=zyfa.quantize_int8_qk, smooth_k=False),
        "int8 no had": dict(fn=zyfa.quantize_int8_qk, hadamard=False),
        "int8 plain": dict(fn=zyfa.quantize_int8_qk, hadamard=False, smooth_k=False),
    }
    for name, opts in variants.items():
        if only and name not in only:
            continue
        f = opts.pop("fn")

        def call():
            return f(q, k, v, fused=True, **opts)
        ms = median_ms(call)
        call()
        torch.cuda.synchronize()
        rec = {"ms": ms, "host_ms": host_ms(call), "kernels_ms": kernels_ms(call)}
        rec["gb_s_3B"] = elems * 3 / ms / 1e6          # 2 bytes read + 1 written, what any quantizer moves
        out[name] = rec
        top = sorted(rec["kernels_ms"].items(), key=lambda kv: -kv[1])[:3]
        print(f"{name:16s} {ms:.3f} ms, host {rec['host_ms']:.3f} ms, {rec['gb_s_3B']:.0f} GB/s; "
              + ", ".join(f"{n}={t}" for n, t in top))
    return out


if __name__ == "__main__":
    sys.exit(main())
