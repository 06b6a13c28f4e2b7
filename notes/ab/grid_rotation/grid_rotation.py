"""Lab (session p, CPU only): the quantizers' Hadamard rotation on an exact integer grid, as int8
MMAs (notes/QUANTIZER.md, "a route to the 70% bar").

zyfa.quantize.rotate forms (x * signs) @ H * scale by Sylvester butterflies in a fixed order (a
float32 matmul's order is the tensor core's own, so its bits could not be a contract). Here each
block of B channels (B = the largest power of two dividing the head dim, as hadamard_parts) is
first put on an integer grid: e = the exponent of its largest magnitude (at least E_FLOOR),
a = RN(y * 2^(GRID - e)), |a| < 2^(GRID + 1). Integer sums do not depend on their order, so
r = a @ H is exact in int32 (|r| < B * 2^22 <= 2^30 for B <= 256) however it is computed, and the
rotated value is RN_float32(r) * 2^(e - GRID) (exact: a power of two) * scale (one rounding, as
rotate's). The grid's step is 2^-21 of the block's largest value: 14 bits below int8's.

On a GPU, a as three balanced int8 digits (a = d0 + 2^8 d1 + 2^16 d2; d0, d1 in [-128, 127],
|d2| <= 64) gives r from three int8 dots with the +-1 Sylvester matrix, recombined by shifts.

    python notes/ab/grid_rotation/grid_rotation.py     # bits against the reference (interpreter), ptxas counts
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from zyfa.quantize_common import hadamard_parts
from zyfa.spec.constants import MAGIC, MAGIC_BITS

GRID = 21                 # |a| < 2^22: the magic-number rounding's range, and the int8 digits' (|d2| <= 64)
E_FLOOR = -100            # blocks whose largest value is below 2^-100 take this exponent (2^(GRID - e) finite)

_GRID = tl.constexpr(GRID)
_E_FLOOR = tl.constexpr(E_FLOOR)
_MAG = tl.constexpr(MAGIC)
_MAG_BITS = tl.constexpr(MAGIC_BITS)


def sylvester(n: int) -> torch.Tensor:
    """The n x n Sylvester Hadamard matrix of +-1 (int8); H[i, j] = (-1)^popcount(i & j)."""
    i = torch.arange(n)
    bits = (i[:, None] & i[None, :])
    parity = torch.zeros_like(bits)
    while bits.any():
        parity ^= bits & 1
        bits = bits >> 1
    return (1 - 2 * parity).to(torch.int8)


def block_exponent(amax: torch.Tensor) -> torch.Tensor:
    """The unbiased exponent field of float32 amax (>= 0), at least E_FLOOR (int32)."""
    e = ((amax.float().view(torch.int32) >> 23) & 0xFF) - 127
    return torch.clamp(e, min=E_FLOOR)


def pow2(e: torch.Tensor) -> torch.Tensor:
    """2^e as float32 for integer e in the normal range, from the bits."""
    return ((e + 127) << 23).to(torch.int32).view(torch.float32)


def rotate_grid(x: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """The reference: float32 x (..., D) rotated on the grid (module docstring)."""
    D = x.shape[-1]
    signs, block, scale = hadamard_parts(D, seed)
    y = (x.float() * signs.to(x.device, torch.float32)).reshape(*x.shape[:-1], D // block, block)
    e = block_exponent(y.abs().amax(-1, keepdim=True))
    a = torch.round(y * pow2(GRID - e))                          # exact scaling, then half to even
    r = (a.double() @ sylvester(block).double().to(x.device))    # exact: integers below 2^53
    out = r.float() * pow2(e - GRID)
    return (out * torch.tensor(scale, dtype=torch.float32, device=x.device)).reshape(x.shape)


@triton.jit
def grid_rotation(y, hmat, BS: tl.constexpr, BD: tl.constexpr, HB: tl.constexpr):
    """y (BS, BD) float32, the signs applied, rotated in blocks of HB channels on the grid;
    hmat the (HB, HB) int8 Sylvester matrix. The scale is the caller's."""
    NB: tl.constexpr = BD // HB
    yb = tl.reshape(y, (BS * NB, HB))
    amax = tl.max(tl.abs(yb), axis=1)
    e = tl.maximum(((amax.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127, _E_FLOOR)
    up = ((-e + (_GRID + 127)) << 23).to(tl.float32, bitcast=True)        # 2^(GRID - e); tensor first
    a = ((yb * up[:, None]) + _MAG).to(tl.int32, bitcast=True) - _MAG_BITS       # round half to even
    d0 = ((a + 128) & 255) - 128
    a1 = (a - d0) >> 8
    d1 = ((a1 + 128) & 255) - 128
    d2 = (a1 - d1) >> 8
    r = tl.dot(d0.to(tl.int8), hmat, out_dtype=tl.int32)
    r += tl.dot(d1.to(tl.int8), hmat, out_dtype=tl.int32) << 8
    r += tl.dot(d2.to(tl.int8), hmat, out_dtype=tl.int32) << 16
    down = ((e + (127 - _GRID)) << 23).to(tl.float32, bitcast=True)       # 2^(e - GRID)
    return tl.reshape(r.to(tl.float32) * down[:, None], (BS, BD))


@triton.jit
def _rotate_kernel(x_ptr, out_ptr, signs_ptr, h_ptr, hscale, S, D, BS: tl.constexpr, BD: tl.constexpr,
                   HB: tl.constexpr):
    """Rows [BS * pid, ...) of x (S, D) float32 rotated on the grid into out (the test harness)."""
    s = tl.program_id(0) * BS + tl.arange(0, BS)
    d = tl.arange(0, BD)
    m = (s[:, None] < S) & (d[None, :] < D)
    y = tl.load(x_ptr + s[:, None] * D + d[None, :], mask=m, other=0.0) * \
        tl.load(signs_ptr + d, mask=d < D, other=0.0)[None, :]
    hb = tl.arange(0, HB)
    hmat = tl.load(h_ptr + hb[:, None] * HB + hb[None, :])
    tl.store(out_ptr + s[:, None] * D + d[None, :], grid_rotation(y, hmat, BS, BD, HB) * hscale, mask=m)


def rotate_grid_triton(x: torch.Tensor, seed: int = 0, BS: int = 16) -> torch.Tensor:
    S, D = x.shape
    signs, block, scale = hadamard_parts(D, seed)
    out = torch.empty_like(x)
    BD = triton.next_power_of_2(D)
    _rotate_kernel[(triton.cdiv(S, BS),)](x, out, signs.float().to(x.device), sylvester(block).to(x.device), scale,
                                          S, D, BS=BS, BD=BD, HB=block)
    return out


def _check(n_rows=64, seed=0):
    """Bits against the reference over head dims 64 / 128 / 192 / 256 and inputs with outliers,
    zeros, ties on the grid and tiny blocks; and the distance from zyfa.quantize.rotate."""
    from zyfa.quantize import rotate
    g = torch.Generator().manual_seed(seed)
    worst = {}
    for D in (64, 128, 192, 256):
        x = torch.randn(n_rows, D, generator=g) * torch.logspace(-3, 3, n_rows)[:, None]
        x[0] = 0.0                                               # a zero row
        x[1, :D // 2] = 1e-35                                    # tiny blocks (E_FLOOR)
        x[2, 5] = 300.0                                          # an outlier channel
        x[3] = torch.round(x[3] * 4) / 4                         # values on a coarse grid
        x = x.bfloat16().float()
        ref = rotate_grid(x, seed)
        got = rotate_grid_triton(x, seed)
        assert torch.equal(got, ref), (D, (got - ref).abs().max())
        old = rotate(x, seed)
        worst[D] = ((ref - old).abs() / old.abs().amax(-1, keepdim=True).clamp(min=1e-30)).max().item()
    return worst


if __name__ == "__main__":
    import os
    os.environ.setdefault("TRITON_INTERPRET", "1")
    print("bit for bit the reference; largest difference from rotate() over each row's amax:", _check())
