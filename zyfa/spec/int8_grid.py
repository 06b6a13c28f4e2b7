"""The INT8 Q.K^T mode's grid fold, bit for bit (docs/algorithm.md, "INT8 Q.K^T").

The generated kernel takes the scores biased, R = M + S (M = MAGIC = 1.5 * 2^23: the bits of
S + MAGIC_BITS, no conversion instruction) and y in one FFMA, fma(R, c, -X). That is S c - r
exactly where X = M |c| + r is a float32 and X - M |c| = r, so the spec puts each block's
max on M |c|'s grid:

  c  = the float32 factor with its two lowest significand bits cleared: M |c| is exact
  m  = the block's max of the exact products S c (one FMA with the next line's)
  X  = RU(M |c| + m)          rounded up, so r >= every S c and y <= 0 (P <= 2^8) for any c
  r  = X - M |c|              exact (Sterbenz: |m| <= 2^22 |c| < M |c| / 3)

then floored at NEG_FLOOR (a fully masked row's -inf too; the NaN of a row that sees a NaN
factor stays). The exact rule's addend RD(8 - X) carries P's offset; rounded
down, so y + 8 <= 8 still where 8 - X is not a float32 (|c| above ~10 or below ~6e-7)."""
from __future__ import annotations

import torch

from .constants import MAGIC, NEG_FLOOR, P_OFFSET_LOG2


def grid_factor(c: torch.Tensor) -> torch.Tensor:
    """float32 c with its two lowest significand bits cleared (M c exact in float32)."""
    return (c.float().contiguous().view(torch.int32) & ~3).view(torch.float32)


def _rounded(v: torch.Tensor, up: bool) -> torch.Tensor:
    """float64 ``v`` rounded to float32 up (``up``) or down, exactly (v holds the exact value)."""
    f = v.float()
    off = f.double() < v if up else f.double() > v
    step = torch.full_like(f, float("inf") if up else float("-inf"))
    return torch.where(off, torch.nextafter(f, step), f)


def grid_offset(c: torch.Tensor) -> torch.Tensor:
    """M |c| over a block's keys (float32, exact): the largest finite |c| (all of a block's keys
    share one on the generated kernel's path; a non-finite factor reaches the rows that see
    it through t, and leaves the others' maxima alone)."""
    a = c.abs()
    return MAGIC * torch.where(a.isfinite(), a, torch.zeros_like(a)).amax(-1)


def grid_max(m: torch.Tensor, offset: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(X, r): the row maxima ``m`` of S c (float64, exact; -inf where fully masked) on the grid
    of ``offset`` = M |c|, X = RU(offset + m), r = X - offset floored at NEG_FLOOR."""
    X = _rounded(offset.double() + m, up=True)               # the float64 sum is exact
    return X, torch.clamp(X - offset, min=NEG_FLOOR)


def y_shifted(acc: torch.Tensor, c: torch.Tensor, X: torch.Tensor, offset: torch.Tensor,
              fused: bool = True) -> torch.Tensor:
    """The exact rule's y + 8 as the kernel's fma(R, |c|, RD(8 - X)) = RN(S c + b), b = M |c| +
    RD(8 - X) (exact in float64 for 6e-16 < |c| < 5e9); ``fused`` False rounds S c and b to
    float32 first, as Triton's interpreter does (its float32 b is b where M |c| >= 48)."""
    b = offset.double() + _rounded(P_OFFSET_LOG2 - X.double(), up=False).double()
    if fused:
        return (acc.double() * c.double() + b[..., None]).float()
    return acc.float() * c.float() + b[..., None].float()
