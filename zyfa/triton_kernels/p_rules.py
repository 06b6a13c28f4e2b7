"""P rules in Triton: the E4M3 probability 2^(y + 8) from y = t - r (zyfa.spec.rules is the
contract; tests hold these codes to it bit for bit in the interpreter).

`exact` uses exp2 (MUFU) and a rounding conversion. The lean rules use only
FMA-pipe arithmetic and the magic-number trick: x + 1.5*2^23 leaves
round-half-even(x) in the low mantissa bits, so no float-to-int conversion is
issued; the integer is the E4M3 code itself and is reinterpreted as FP8.
"""
import triton
import triton.language as tl

from ..spec import constants as C
from ..spec import rules as R
from ..spec.e4m3 import round_f16_scalar

P_RULE_IDS = {name: i for i, name in enumerate(R.P_RULES)}     # the kernel's P_RULE constexpr
P_EXACT: tl.constexpr = tl.constexpr(P_RULE_IDS["exact"])
P_LEAN: tl.constexpr = tl.constexpr(P_RULE_IDS["lean"])
P_LEAN_QUAD: tl.constexpr = tl.constexpr(P_RULE_IDS["lean_quad"])
P_LEAN_CUBIC: tl.constexpr = tl.constexpr(P_RULE_IDS["lean_cubic"])
P_LEAN_CUBIC_F16: tl.constexpr = tl.constexpr(P_RULE_IDS["lean_cubic_f16"])

_MAGIC: tl.constexpr = tl.constexpr(C.MAGIC)
_MAGIC_BITS: tl.constexpr = tl.constexpr(C.MAGIC_BITS)
_ONE_BITS: tl.constexpr = tl.constexpr(float(C.P_ONE_BITS))
_Y_FLOOR: tl.constexpr = tl.constexpr(C.Y_FLOOR)
_OFFSET: tl.constexpr = tl.constexpr(float(C.P_OFFSET_LOG2))
_QUAD_SLOPE: tl.constexpr = tl.constexpr(8.0 * R.LEAN_QUAD_K)
_QUAD_BASE: tl.constexpr = tl.constexpr(8.0 * (1.0 - R.LEAN_QUAD_K))
_CUBIC_B: tl.constexpr = tl.constexpr(R.LEAN_CUBIC_B)
_CUBIC_AB: tl.constexpr = tl.constexpr(R.LEAN_CUBIC_A - R.LEAN_CUBIC_B)
_CUBIC_1A: tl.constexpr = tl.constexpr(1.0 - R.LEAN_CUBIC_A)
# lean_cubic_f16: half precision throughout (constants already rounded to half, exactly)
_H_MAGIC: tl.constexpr = tl.constexpr(C.F16_MAGIC)
_H_B8: tl.constexpr = tl.constexpr(round_f16_scalar(8.0 * R.LEAN_CUBIC_B))
_H_AB8: tl.constexpr = tl.constexpr(round_f16_scalar(8.0 * (R.LEAN_CUBIC_A - R.LEAN_CUBIC_B)))
_H_1A8: tl.constexpr = tl.constexpr(round_f16_scalar(8.0 * (1.0 - R.LEAN_CUBIC_A)))
_H_BASE: tl.constexpr = tl.constexpr(C.P_ONE_BITS - 7 * C.F16_MAGIC)
_H_MAGIC_BITS: tl.constexpr = tl.constexpr(C.F16_MAGIC_BITS)


@triton.jit
def _h(x, value):
    """The constant ``value`` (exactly a half) as a half tensor shaped like ``x``: Python
    floats would promote half arithmetic to float32."""
    return tl.full(x.shape, value, tl.float16)


@triton.jit
def lean_cubic_f16_bits(y):
    """int32 E4M3 codes of 2^(y + 8) by the cubic in half precision (zyfa.spec.rules.p_bits,
    lean_cubic_f16): y rounded to half, every step rounded to half; on GPUs the pairs of
    elements a thread holds can run as packed half instructions."""
    h = tl.maximum(y.to(tl.float16), _h(y, _Y_FLOOR))
    a = (h - _h(y, 0.5)) + _h(y, _H_MAGIC)
    fl = a - _h(y, _H_MAGIC)
    f = h - fl
    inner = tl.fma(f, _h(y, _H_B8), _h(y, _H_AB8))
    slope = tl.fma(f, inner, _h(y, _H_1A8))
    w = tl.fma(f, slope, tl.fma(a, _h(y, 8.0), _h(y, _H_BASE)))
    return w.to(tl.int16, bitcast=True).to(tl.int32) - _H_MAGIC_BITS


@triton.constexpr_function
def _no_branch(rule_id):
    """The compile-time error of a P rule id no branch of lean_p_bits takes, naming the rule:
    a rule added to the spec's registry gets an id here before it gets Triton code."""
    name = R.P_RULES[rule_id] if 0 <= rule_id < len(R.P_RULES) else f"id {rule_id}"
    return f"lean_p_bits has no branch for P rule {name!r} (zyfa.spec.rules.P_RULES): write its steps here"


@triton.jit
def _floor_split(y):
    """(fl, f) of y clamped to the floor: its floor by the magic number (round-half-even(y -
    0.5): floor(y), or y - 1 at integers) and the fraction; the float32 floor rules' first steps."""
    y = tl.maximum(y, _Y_FLOOR)
    fl = ((y - 0.5) + _MAGIC) - _MAGIC
    return fl, y - fl


@triton.jit
def _code_of(w):
    """The E4M3 code a float32 rule left in w = code + MAGIC, as int32."""
    return w.to(tl.int32, bitcast=True) - _MAGIC_BITS


@triton.jit
def lean_p_bits(y, P_RULE: tl.constexpr):
    """int32 E4M3 codes in [0, 120] of 2^(y + 8) for a lean rule (zyfa.spec.rules.p_bits):
    one branch a rule, and a compile-time error for a rule without one."""
    if P_RULE == P_LEAN_CUBIC_F16:
        codes = lean_cubic_f16_bits(y)
    elif P_RULE == P_LEAN:
        codes = _code_of(tl.fma(tl.maximum(y, _Y_FLOOR), 8.0, _ONE_BITS + _MAGIC))
    elif P_RULE == P_LEAN_QUAD:
        fl, f = _floor_split(y)
        codes = _code_of(tl.fma(f, tl.fma(f, _QUAD_SLOPE, _QUAD_BASE), fl * 8.0 + (_ONE_BITS + _MAGIC)))
    elif P_RULE == P_LEAN_CUBIC:
        fl, f = _floor_split(y)
        slope = tl.fma(f, tl.fma(f, _CUBIC_B, _CUBIC_AB), _CUBIC_1A) * 8.0
        codes = _code_of(tl.fma(f, slope, fl * 8.0 + (_ONE_BITS + _MAGIC)))
    else:
        tl.static_assert(False, _no_branch(P_RULE))
    return codes


@triton.jit
def exact_p_bits(y8):
    """int32 E4M3 codes of exp2(y8) (y8 = y + 8) rounded to nearest-even, built with integer
    arithmetic.

    Float-to-FP8 casts are not used: Triton's interpreter does not round them like the
    GPU does, and integer rounding makes every path agree with zyfa.spec.rules bit for bit.
    """
    return e4m3_bits_nonneg(tl.exp2(y8))


@triton.jit
def e4m3_bits_nonneg(x):
    """int32 E4M3 codes of non-negative float32 x <= 448, rounded to nearest-even by integer
    arithmetic (the interpreter's casts do not round like the GPU)."""
    u = x.to(tl.int32, bitcast=True)
    # normal E4M3 (x >= 2^-6): keep 3 mantissa bits, round half to even, rebias 127 -> 7
    normal = ((u + 0x7FFFF + ((u >> 20) & 1)) >> 20) - 960
    # subnormal E4M3 (x < 2^-6): the code is round-half-even(x * 2^9)
    sub = tl.fma(x, 512.0, _MAGIC).to(tl.int32, bitcast=True) - _MAGIC_BITS
    return tl.where(x < 0.015625, sub, normal)


@triton.jit
def e4m3_rne(x):
    """int8 E4M3 codes of float32 x, rounded to nearest-even by the NVIDIA GPU's conversion
    (sm_89+, saturating), four values an instruction pair. Inline PTX: Triton 3.6's own
    float32 -> float8e4nv cast, fed to a dot, gave NaN outputs on the H200."""
    return tl.inline_asm_elementwise(
        "{ .reg .b16 lo, hi;\n"
        "cvt.rn.satfinite.e4m3x2.f32 lo, $2, $1;\n"
        "cvt.rn.satfinite.e4m3x2.f32 hi, $4, $3;\n"
        "mov.b32 $0, {lo, hi}; }",
        "=r,r,r,r,r", [x], dtype=tl.int8, is_pure=True, pack=4)


@triton.jit
def p_fp8(y, P_RULE: tl.constexpr, HW_ROUND: tl.constexpr = False, Y_SHIFTED: tl.constexpr = False):
    """float8e4nv probabilities 2^(y + 8) under P_RULE. HW_ROUND (GPUs only: the
    interpreter's casts round differently): the exact rule by the hardware's conversion, one
    instruction for two values instead of the integer rounding's ~8 a value. Y_SHIFTED (the
    exact rule only): y already holds y + 8, as exp2 takes it."""
    if P_RULE == P_EXACT:
        if not Y_SHIFTED:
            y = y + _OFFSET                 # exp2's argument
        if HW_ROUND:
            return e4m3_rne(tl.exp2(y)).to(tl.float8e4nv, bitcast=True)
        bits = exact_p_bits(y)
    else:
        bits = lean_p_bits(y, P_RULE)
    return bits.to(tl.int8).to(tl.float8e4nv, bitcast=True)
