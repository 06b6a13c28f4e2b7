"""Ways to write the quantizer's Hadamard butterflies in Triton, timed on q's INT8 pass alone.

    python notes/ab/rotation_variants.py [--check] [OUT.json]

Each variant does what the INT8 quantizer's launch does for q (signs, the seven butterfly
stages of d128, the scale, a descale a token, int8 codes, round half to even; the division by
the row's reciprocal, _quotient) with one way of moving the butterflies' partners:
  gather    every stage gathers its partner column (warp shuffles, Triton's gather lowering
            even where the pair lies in one thread) and forms p + sign * y in one FMA (the
            quantizer's form until 2026-12-03)
  pairs     the quantizer's _butterflies: gathers for the strides 64 .. 4, the strides 2 and
            1 by reshape / split / join (those pairs are in one thread's registers)
  pairs3    gathers for 64 .. 8, the strides 4, 2 and 1 by reshape (SASS: through shared
            memory, +7 barriers)
in tiles of BS tokens with num_warps warps. --check: every variant's codes and descales equal
zyfa.quantize_int8_qk's for q (the PyTorch path; on the CPU under TRITON_INTERPRET=1). On a
GPU: each variant's time and bandwidth (2 bytes read, 1 written an element) beside a copy of q.
Measured forms no longer here (notes/QUANTIZER.md): reshape / permute for every stage (through
shared memory, 2x slower), a select of two additions a stage, an IEEE division an element.
"""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from zyfa.spec.constants import AMAX_FLOOR, INT8_MAX, MAGIC, MAGIC_BITS  # noqa: E402
from zyfa.device import interpreter_active  # noqa: E402
from zyfa.triton_kernels.quantize import _butterflies, _pair_stage, _quotient, _rotation  # noqa: E402

_FLOOR: tl.constexpr = tl.constexpr(AMAX_FLOOR)
_I8: tl.constexpr = tl.constexpr(INT8_MAX)
_MAG: tl.constexpr = tl.constexpr(MAGIC)
_MAG_BITS: tl.constexpr = tl.constexpr(MAGIC_BITS)
MODES = {"gather": 0, "pairs": 1, "pairs3": 2}


@triton.jit
def _gathered(y, BLOCK: tl.constexpr, BS: tl.constexpr, BD: tl.constexpr, NSTAGE: tl.constexpr):
    d = tl.arange(0, BD)
    for i in tl.static_range(NSTAGE):
        stride = BLOCK >> (i + 1)
        p = tl.gather(y, tl.broadcast_to((d ^ stride)[None, :], (BS, BD)), axis=1)
        y = p + tl.where((d & stride) == 0, 1.0, -1.0)[None, :] * y
    return y


@triton.jit
def _q_int8(x_ptr, out_ptr, ds_ptr, signs_ptr, scale_ptr, S, H,
            MODE: tl.constexpr, BS: tl.constexpr, BD: tl.constexpr, NST: tl.constexpr, FMA_DIV: tl.constexpr):
    """Grid (tiles of BS tokens, heads), batch 1: q (1, S, H, BD) -> int8 codes, descales (H, S)."""
    s = tl.program_id(0) * BS + tl.arange(0, BS)
    h = tl.program_id(1)
    d = tl.arange(0, BD)
    m = (s < S)[:, None]
    x = tl.load(x_ptr + (s[:, None] * H + h) * BD + d[None, :], mask=m, other=0.0).to(tl.float32)
    x = x * tl.load(signs_ptr + d)[None, :]
    if MODE == 0:
        x = _gathered(x, BD, BS, BD, NST)
    elif MODE == 1:
        x = _butterflies(x, BD, BS, BD, NST)
    else:
        x = _gathered(x, BD, BS, BD, NST - 3)
        for i in tl.static_range(3):
            x = _pair_stage(x, 4 >> i, BS, BD)
    x = x * tl.load(scale_ptr)
    fin = tl.abs(x) < float("inf")
    amax = tl.max(tl.where(fin & m, tl.abs(x), 0.0), axis=1)
    descale = tl.math.div_rn(tl.maximum(amax, _FLOOR), _I8)
    y = tl.minimum(tl.maximum(_quotient(x, descale[:, None], FMA_DIV), -_I8), _I8)
    code = tl.where(fin, (y + _MAG).to(tl.int32, bitcast=True) - _MAG_BITS, 0)
    tl.store(out_ptr + (s[:, None] * H + h) * BD + d[None, :], code.to(tl.int8), mask=m)
    bad = tl.sum((m & ~fin).to(tl.int32), axis=1)
    tl.store(ds_ptr + h * S + s, tl.where(bad == 0, descale, float("nan")), mask=s < S)


def q_int8(q: torch.Tensor, mode: str, bs: int, warps: int, seed: int = 0):
    """(codes (1, S, H, D) int8, descales (1, H, S)) of q by one variant."""
    _, S, H, D = q.shape
    signs, scale, block = _rotation(D, seed, q.device)
    assert block == D, "the variants take power-of-two head dims"
    out = torch.empty(q.shape, dtype=torch.int8, device=q.device)
    ds = torch.empty(1, H, S, dtype=torch.float32, device=q.device)
    _q_int8[(triton.cdiv(S, bs), H)](q, out, ds, signs, scale, S, H, MODE=MODES[mode], BS=bs, BD=D,
                                     NST=D.bit_length() - 1, FMA_DIV=not interpreter_active(),
                                     num_warps=warps)
    return out, ds


VARIANTS = [(mode, bs, warps) for mode in MODES for bs, warps in ((16, 4), (32, 4))]


def check(S: int = 70, H: int = 3, D: int = 128) -> None:
    from zyfa.activations import make
    from zyfa.quantize import quantize_int8_qk
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    q, k, v = (t.bfloat16() for t in make("realistic", 1, S, H, H, D, seed=3, device=dev))
    q[0, 5, 1, 9] = float("nan")
    want = quantize_int8_qk(q, k, v, smooth_k=False, hadamard=True, fused=False)
    for mode, bs, warps in VARIANTS:
        codes, ds = q_int8(q, mode, bs, warps)
        same = torch.equal(codes, want.q) and torch.equal(ds.isnan(), want.q_descale.isnan()) and \
            torch.equal(ds.nan_to_num(0.0), want.q_descale.nan_to_num(0.0))
        print(f"{mode:8s} BS {bs:3d} warps {warps}: {'same bits' if same else 'DIFFERENT'}")
        assert same, (mode, bs, warps)


def time_all(out_path: str | None) -> None:
    from zyfa.activations import make
    from zyfa.bench.measure import median_ms
    q = make("realistic", 1, 16384, 32, 8, 128, seed=1, device="cuda")[0].bfloat16()   # Mistral-7B 16K's q
    dst = torch.empty_like(q)
    rec = {"copy_ms": median_ms(lambda: dst.copy_(q))}
    print(f"copy of q {rec['copy_ms']:.3f} ms ({q.numel() * 4 / rec['copy_ms'] / 1e6:.0f} GB/s)")
    want = q_int8(q, "gather", 16, 4)
    for mode, bs, warps in VARIANTS:
        got = q_int8(q, mode, bs, warps)
        same = all(torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0)) for a, b in zip(got, want))
        ms = median_ms(lambda: q_int8(q, mode, bs, warps))
        rec[f"{mode}_bs{bs}_w{warps}"] = {"ms": ms, "gb_s": q.numel() * 3 / ms / 1e6, "same_bits": same}
        print(f"{mode:8s} BS {bs:3d} warps {warps}: {ms:.3f} ms {q.numel() * 3 / ms / 1e6:6.0f} GB/s"
              f"{'' if same else '  DIFFERENT BITS'}")
    if out_path:
        with open(out_path, "w") as f:
            json.dump(rec, f, indent=1)


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--check" in args:
        check()
    else:
        time_all(args[0] if args else None)
