"""FP8 (E4M3, "fn" variant) bit arithmetic and the probability (P) rules.

Everything here is written in torch with integer or exactly-emulated float32
arithmetic, so it is the bit-level contract for the kernels' P rules.

E4M3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities, 0x7F/0xFF
are NaN; largest finite 448 (bits 0x7E). Non-negative values only are needed
for probabilities: bits = 8*e + m, value = 2^(e-7) * (1 + m/8) for e >= 1 and
m * 2^-9 for e == 0 (subnormals).

P rules map y = t - r (log2 domain, y <= 0 for the block's entries) to the
E4M3 bits of 2^(y + 8): the block's largest probability lands on 256 = 0x78.
"""
from __future__ import annotations

import torch

E4M3_MAX = 448.0
P_OFFSET_LOG2 = 8            # P is stored as 2^(y + 8): the top of the range
P_ONE_BITS = 120             # E4M3 bits of 2^8 (exponent 15, mantissa 0)
Y_FLOOR = -15.0              # clamp for y: 8*Y_FLOOR + 120 == 0, so bits >= 0
MAGIC = 12582912.0           # 1.5 * 2^23: x + MAGIC leaves round-half-even(x) in the low bits

# Polynomials for the mantissa g(f) ~= 2^f - 1, f in [0, 1), with g(0)=0, g(1)=1.
# Fitted (see bench/fit_lean.py notes in README) to match round-to-nearest
# mantissas: quad mismatches ~2% of mantissas by one step, cubic ~0.08%.
LEAN_QUAD_K = float(torch.tensor(0.345, dtype=torch.float32))
LEAN_CUBIC_A = float(torch.tensor(0.3048215, dtype=torch.float32))
LEAN_CUBIC_B = float(torch.tensor(0.0776252, dtype=torch.float32))

P_RULES = ("exact", "lean", "lean_quad", "lean_cubic", "lean_cubic_f16")
LEAN_RULES = ("lean", "lean_quad", "lean_cubic")   # no exponential, float32: every generated kernel takes these
HALF_RULES = ("lean_cubic_f16",)                   # the cubic in packed half precision (two scores an HFMA2)
F16_MAGIC = 1536.0           # 1.5 * 2^10: the magic number of half precision (ulp 1 on [1024, 2048))
REF_RULES = ("block", "running", "block_pow2")
# the default: the fastest rule measured on the H200's default path (the generated kernel: MUFU
# exp2 and the hardware's E4M3 rounding, bench/PTX_NOTES.md v7), and by definition exact's accuracy
DEFAULT_P_RULE = "exact"


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


def _p_bits_cubic_f16(y: torch.Tensor, fused: bool) -> torch.Tensor:
    """lean_cubic in half precision: y rounded to half, then the same steps as the float32
    cubic with half's magic number and the coefficients rounded to half; every operation is
    rounded to half (two scores an instruction in packed half arithmetic)."""
    y = torch.maximum(round_f16(y.double()), torch.tensor(Y_FLOOR, dtype=torch.float64))
    a = round_f16(round_f16(y - 0.5) + F16_MAGIC)     # floor(y) = rne(y - 0.5) via the magic number
    fl = round_f16(a - F16_MAGIC)
    f = round_f16(y - fl)
    inner = fma16(f, round_f16_scalar(8.0 * LEAN_CUBIC_B), round_f16_scalar(8.0 * (LEAN_CUBIC_A - LEAN_CUBIC_B)), fused)
    slope = fma16(f, inner, round_f16_scalar(8.0 * (1.0 - LEAN_CUBIC_A)), fused)
    base = fma16(a, 8.0, P_ONE_BITS - 7 * F16_MAGIC, fused)    # 8 floor(y) + 120 + MAGIC, exact
    w = fma16(f, slope, base, fused)
    return (w - F16_MAGIC).to(torch.int32)


def p_bits(y: torch.Tensor, rule: str, fused: bool = True) -> torch.Tensor:
    """E4M3 bits of the probability 2^(y + 8) under a P rule; y is float32 (t - r)."""
    y = _f32(y)
    if rule == "exact":
        return e4m3_encode_nonneg(torch.exp2(y.double() + P_OFFSET_LOG2))
    if rule == "lean_cubic_f16":
        return _p_bits_cubic_f16(y, fused)
    # every lean rule starts from the clamped y, so bits >= 0 without a second clamp
    y = torch.maximum(y, torch.tensor(Y_FLOOR, dtype=torch.float32))
    if rule == "lean":
        # one FFMA: round(8*y + 120) through the magic number (8*y is exact)
        w = fma32(y, 8.0, P_ONE_BITS + MAGIC, fused)
        return (w.double() - MAGIC).to(torch.int32)
    if rule not in ("lean_quad", "lean_cubic"):
        raise ValueError(f"p_rule must be one of {P_RULES}, got {rule!r}")
    # floor(y) with the magic number: round-half-even(y - 0.5); at integer y this may
    # give y - 1 with f = 1, which lands on the same bits because g(1) = 1
    a = (y - 0.5) + MAGIC
    fl = a - MAGIC
    f = y - fl
    if rule == "lean_quad":
        # g(f) = f * (k f + 1 - k), scaled by 8 into the mantissa
        slope = fma32(f, 8.0 * LEAN_QUAD_K, 8.0 * (1.0 - LEAN_QUAD_K), fused)
    else:
        # g(f) = f * (1 + (f - 1)(a + b f)) = f * (b f^2 + (a - b) f + 1 - a)
        inner = fma32(f, LEAN_CUBIC_B, LEAN_CUBIC_A - LEAN_CUBIC_B, fused)
        slope = fma32(f, inner, 1.0 - LEAN_CUBIC_A, fused) * 8.0
    base = fl * 8.0 + (P_ONE_BITS + MAGIC)      # exact: small integer + MAGIC
    w = fma32(f, slope, base, fused)
    return (w.double() - MAGIC).to(torch.int32)


def p_values(y: torch.Tensor, rule: str, fused: bool = True) -> torch.Tensor:
    """The probability 2^(y + 8) as rounded by the rule, as float64 (E4M3 values)."""
    return e4m3_decode(p_bits(y, rule, fused))
