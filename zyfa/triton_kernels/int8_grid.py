"""The INT8 Q.K^T mode's grid fold in Triton, as zyfa.spec.int8_grid states it: c with two
low bits cleared, the block max rounded up onto M |c|'s grid, the exact rule's addend rounded
down. Triton has no directed roundings: the sums are exact in float64, and a float32 rounded
to nearest steps one ulp where it landed on the wrong side."""
import triton
import triton.language as tl

from ..spec import constants as C

_MAGIC: tl.constexpr = tl.constexpr(C.MAGIC)
_NEG_FLOOR: tl.constexpr = tl.constexpr(C.NEG_FLOOR)
_P_OFFSET: tl.constexpr = tl.constexpr(float(C.P_OFFSET_LOG2))


@triton.jit
def grid_factor(c):
    """c with its two lowest significand bits cleared: M c exact in float32."""
    return (c.to(tl.int32, bitcast=True) & -4).to(tl.float32, bitcast=True)


@triton.jit
def _rounded(v, UP: tl.constexpr):
    """float64 ``v`` (an exact value) rounded to float32 up (UP) or down."""
    f = v.to(tl.float32)
    bits = f.to(tl.int32, bitcast=True)
    if UP:
        off = f.to(tl.float64) < v
        step = tl.where(f > 0, bits + 1, bits - 1)
    else:
        off = f.to(tl.float64) > v
        step = tl.where(f > 0, bits - 1, bits + 1)
    return tl.where(off, step.to(tl.float32, bitcast=True), f)


@triton.jit
def grid_max(m, c):
    """(offset, X, r) for the rows' maxima ``m`` (float64, exact; -inf where fully masked) of
    the products S c: offset
    = M |c| (the block's largest finite |c|), X = RU(offset + m), r = X - offset (exact)
    floored at NEG_FLOOR (NaN stays)."""
    a = tl.abs(c)
    offset = _MAGIC * tl.max(tl.where(a < float("inf"), a, 0.0), 1)
    X = _rounded(offset.to(tl.float64) + m, True)
    return offset, X, tl.maximum(X - offset, _NEG_FLOOR, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def shifted_addend(offset, X):
    """The exact rule's addend beside S c for y + 8: M |c| + RD(8 - X) (the generated kernel's
    RD(8 - X) beside R = M + S; the float32 sum is exact where M |c| >= 48)."""
    return offset + _rounded(-X.to(tl.float64) + _P_OFFSET, False)
