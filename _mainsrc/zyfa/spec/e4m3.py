"""FP8 (E4M3, "fn" variant) bit arithmetic, and float32 / half arithmetic emulated exactly
in torch: the bit-level ground the P rules (zyfa.spec.rules) are written on.

E4M3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities, 0x7F/0xFF
are NaN; largest finite 448 (bits 0x7E). Non-negative values only are needed
for probabilities: bits = 8*e + m, value = 2^(e-7) * (1 + m/8) for e >= 1 and
m * 2^-9 for e == 0 (subnormals).
"""
from __future__ import annotations

import torch


def e4m3_decode(bits: torch.Tensor) -> torch.Tensor:
    """E4M3fn bits (any int dtype, sign included) to float64; NaN for 0x7F/0xFF."""
    b = bits.to(torch.int64) & 0xFF
    sign = torch.where(b >= 0x80, -1.0, 1.0).to(torch.float64)
    mag = b & 0x7F
    e = mag >> 3
    m = (mag & 7).to(torch.float64)
    normal = torch.ldexp(1.0 + m / 8.0, (e - 7).to(torch.int64))
    sub = m * 2.0 ** -9
    val = torch.where(e == 0, sub, normal) * sign
    return torch.where(mag == 0x7F, torch.full_like(val, float("nan")), val)


def e4m3_encode_nonneg(x: torch.Tensor) -> torch.Tensor:
    """Round non-negative float64 values to E4M3fn bits, round-half-even, saturating at 448."""
    x = x.to(torch.float64)
    e = torch.floor(torch.log2(torch.clamp(x, min=2.0 ** -9)))
    e = torch.clamp(e, min=-6.0)
    # spacing is 2^(e-3) in the binade [2^e, 2^(e+1)) and 2^-9 among subnormals;
    # bits counted from zero in steps of that spacing give the code directly
    step = torch.ldexp(torch.ones_like(x), (e - 3).to(torch.int64))
    k = torch.round(x / step)                         # round-half-even
    bits = torch.where(e <= -6, k, 8.0 * (e + 7) + (k - 8.0))
    bits = torch.clamp(bits, max=0x7E)
    return torch.where(torch.isnan(x), torch.full_like(bits, 0x7F), bits).to(torch.int32)


def _f32(x):
    if isinstance(x, torch.Tensor):
        return x.to(torch.float32)
    return torch.tensor(x, dtype=torch.float32)


def fma32(a, b, c, fused: bool = True):
    """float32 a*b + c, with one rounding (hardware FFMA) or two (separate mul, add).

    Fused is emulated in float64 (exact product, then the sum rounded twice);
    it differs from a true FMA only when the float64 sum lands on a float32 tie
    that the exact sum was not on (probability ~2^-29 per element).
    """
    a, b, c = _f32(a), _f32(b), _f32(c)
    if fused:
        return (a.double() * b.double() + c.double()).float()
    return a * b + c


def round_f16(x: torch.Tensor) -> torch.Tensor:
    """float64 values rounded once to IEEE half precision (nearest even, subnormals, overflow
    to inf), returned as float64. (A cast through float32 could round twice.)"""
    x = x.to(torch.float64)
    _, ex = torch.frexp(x)                             # x = m 2^ex, 0.5 <= |m| < 1
    step = torch.clamp(ex, min=-13) - 11               # half's spacing: 2^(ex - 11), 2^-24 below 2^-14
    r = torch.ldexp(torch.round(torch.ldexp(x, -step)), step)
    r = torch.where(r.abs() > 65504.0, torch.copysign(torch.full_like(r, float("inf")), r), r)
    return torch.where(torch.isfinite(x), r, x)


def fma16(a, b, c, fused: bool = True):
    """half-precision a*b + c from half values held in float64: one rounding (HFMA2) or two.
    The float64 product and sum are exact for the magnitudes the rule meets."""
    if fused:
        return round_f16(a * b + c)
    return round_f16(round_f16(a * b) + c)


def round_f16_scalar(v: float) -> float:
    return float(round_f16(torch.tensor(v, dtype=torch.float64)))
