"""Every default GPU kernel once, on small shapes, for compute-sanitizer (memcheck, racecheck,
synccheck): the generated Hopper kernel (serial d128 and specialized MLA, exact rule, causal and
not) and the Triton kernels (FP8 exact, BF16; d64 / d128 / MLA / d256). Each output is checked
against float64 so a run that "passes" the sanitizer also computed the right thing.

    /usr/local/cuda/bin/compute-sanitizer --tool memcheck python3 bench/sanitize.py
"""
from __future__ import annotations

import sys

import torch

import zyfa
from zyfa.activations import make
from zyfa.bench.measure import rel_err
from zyfa.spec.reference import attention_fp64

CASES = [  # backend, dtype, (B, Sq, Sk, Hq, Hkv, D, Dv), causal
    ("ptx", "fp8", (1, 200, 300, 2, 1, 128, 128), True),
    ("ptx", "fp8", (1, 130, 130, 2, 2, 128, 128), False),
    ("ptx", "fp8", (1, 200, 300, 2, 1, 192, 128), True),
    ("ptx", "fp8", (1, 130, 130, 2, 2, 192, 128), False),
    ("triton", "fp8", (1, 200, 300, 2, 1, 128, 128), True),
    ("triton", "fp8", (1, 150, 150, 2, 1, 192, 128), True),
    ("triton", "fp8", (1, 150, 150, 2, 1, 64, 64), False),
    ("triton", "bf16", (1, 200, 300, 2, 1, 128, 128), True),
    ("triton", "bf16", (1, 150, 150, 2, 2, 256, 256), True),
    ("triton", "bf16", (1, 150, 150, 2, 1, 192, 128), False),
]


def main() -> int:
    failed = 0
    for backend, dtype, (B, Sq, Sk, Hq, Hkv, D, Dv), causal in CASES:
        q, k, v = make("realistic", B, Sq, Hq, Hkv, D, Dv, seqlen_k=Sk, seed=1, device="cuda")
        if dtype == "fp8":
            x = zyfa.quantize_fp8(q, k, v)
            out = zyfa.flash_attn_func(**x.kwargs(), causal=causal, backend=backend)
            ref = attention_fp64(*x.dequantized(), causal=causal)
            bound = 3e-2
        else:
            out = zyfa.flash_attn_func(q, k, v, causal=causal, backend=backend)
            ref = attention_fp64(q, k, v, causal=causal)
            bound = 1e-2
        torch.cuda.synchronize()
        err = rel_err(out, ref)
        ok = err <= bound and bool(torch.isfinite(out).all())
        failed += not ok
        print(f"{backend:7s} {dtype:5s} B{B} Sq{Sq} Sk{Sk} H{Hq}/{Hkv} d{D}/{Dv} causal={causal}: err {err:.2e} "
              f"{'ok' if ok else 'WRONG'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
