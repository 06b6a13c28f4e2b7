"""The P rules and reference rules, each defined once.

A P rule maps y = t - r (log2 domain, y <= 0 inside a block) to the E4M3 bits of the
probability 2^(y + 8). Families:

  exact  exp2, then round-to-nearest-even to E4M3 (the hardware's exponential);
  lean   float32 FMA-pipe arithmetic only, as a step list (below): no exponential and no
         float-to-int conversion. ``w = code + MAGIC`` leaves the code in the low bits;
  half   the same steps in half precision (two scores an instruction on GPUs), after y is
         rounded to half.

A lean rule's arithmetic is its ``steps``: the torch spec (``p_bits``) runs them, and both
generators (zyfa.asm.ptx.lean_p, zyfa.asm.gfx950.lean_p) emit exactly these operations in
this order, each in its own spelling (tests/spec/test_rule_steps.py checks all three). Constants
already carry the mantissa's factor 8 where it multiplies: scaling by a power of two is exact,
so the result equals the textbook form 8 (f g(f)) bit for bit.

Reference rules say which reference r_j each key block's probabilities use
(zyfa.spec.reference has the whole algorithm): ``block`` (the block's own row max),
``running`` (the running max, FlashAttention's scheme; with the exact rule its row sums too:
sums_unrounded), ``block_pow2`` (the accumulator
reference less a whole number, so the block's weight is a power of two).
"""
from __future__ import annotations

import dataclasses

import torch

from .constants import F16_MAGIC, MAGIC, P_OFFSET_LOG2, P_ONE_BITS, Y_FLOOR
from .e4m3 import e4m3_decode, e4m3_encode_nonneg, fma16, fma32, round_f16, round_f16_scalar


def _f32(x: float) -> float:
    return float(torch.tensor(x, dtype=torch.float32))


# Polynomials for the mantissa g(f) ~= 2^f - 1 on f in [0, 1), with g(0) = 0, g(1) = 1, fitted
# to match round-to-nearest mantissas: the quadratic misses ~2% of them by one step, the cubic ~0.08%.
LEAN_QUAD_K = _f32(0.345)                 # g(f) = f (k f + 1 - k)
LEAN_CUBIC_A = _f32(0.3048215)            # g(f) = f (1 + (f - 1)(a + b f))
LEAN_CUBIC_B = _f32(0.0776252)


@dataclasses.dataclass(frozen=True)
class Step:
    """One arithmetic operation: ``out = op(*args)``; an arg is a value's name or a constant.
    ops: max(a, b); add(a, b); sub(a, b); fma(a, b, c) = a * b + c in one rounding;
    round(a): a in the rule's working precision (the half rules' first step)."""
    op: str
    out: str
    args: tuple


def _floor_steps(magic: float) -> tuple:
    """yc = max(y, floor); fl = floor(yc) = rne(yc - 0.5) by the magic number (at an integer
    yc it may give yc - 1 with f = 1, which lands on the same code because g(1) = 1); f = yc - fl."""
    return (Step("max", "yc", ("y", Y_FLOOR)),
            Step("sub", "a", ("yc", 0.5)),
            Step("add", "a", ("a", magic)),
            Step("sub", "fl", ("a", magic)),
            Step("sub", "f", ("yc", "fl")))


def _code_steps(magic: float) -> tuple:
    """w = f * slope + 8 floor(y) + 120 + magic; the base as 8 a + (120 - 7 magic), exact."""
    return (Step("fma", "base", ("a", 8.0, P_ONE_BITS - 7 * magic)),
            Step("fma", "w", ("f", "slope", "base")))


def _cubic_steps(magic: float, coef=lambda x: x) -> tuple:
    a, b = LEAN_CUBIC_A, LEAN_CUBIC_B
    return (_floor_steps(magic)
            + (Step("fma", "inner", ("f", coef(8.0 * b), coef(8.0 * (a - b)))),
               Step("fma", "slope", ("f", "inner", coef(8.0 * (1.0 - a)))))
            + _code_steps(magic))


@dataclasses.dataclass(frozen=True)
class PRule:
    name: str
    family: str               # "exact" | "lean" | "half"
    steps: tuple = ()         # lean and half rules: the arithmetic, y -> w = code + magic

    @property
    def magic(self) -> float:
        return F16_MAGIC if self.family == "half" else MAGIC


P_RULE_TABLE = {r.name: r for r in (
    PRule("exact", "exact"),
    PRule("lean", "lean", (Step("max", "yc", ("y", Y_FLOOR)),                     # ZYFA's one-FMA rule:
                           Step("fma", "w", ("yc", 8.0, P_ONE_BITS + MAGIC)))),   # round(8 y + 120)
    PRule("lean_quad", "lean", _floor_steps(MAGIC)
          + (Step("fma", "slope", ("f", 8.0 * LEAN_QUAD_K, 8.0 * (1.0 - LEAN_QUAD_K))),)
          + _code_steps(MAGIC)),
    PRule("lean_cubic", "lean", _cubic_steps(MAGIC)),
    PRule("lean_cubic_f16", "half", (Step("round", "y", ("y",)),) + _cubic_steps(F16_MAGIC, round_f16_scalar)),
)}

P_RULES = tuple(P_RULE_TABLE)
LEAN_RULES = tuple(n for n, r in P_RULE_TABLE.items() if r.family == "lean")   # every generated kernel takes these
HALF_RULES = tuple(n for n, r in P_RULE_TABLE.items() if r.family == "half")
# the default: the fastest rule measured on the H200's default path (MUFU exp2 and the
# hardware's E4M3 rounding: MUFU keeps pace with the FP8 tensor cores), and by definition exact's accuracy
DEFAULT_P_RULE = "exact"

REF_RULES = ("block", "running", "block_pow2")
DEFAULT_REF_RULE = "block"


def sums_unrounded(p_rule: str, ref_rule: str) -> bool:
    """Whether the row sums take the probabilities before their E4M3 rounding: the running
    reference with the exact rule, FlashAttention's scheme whole (its exponentials exist
    before the rounding; summing them costs an add a score where the rounded P's sum costs a
    16-bit tensor-core pass). Every other pair sums the rounded P (the lean and half rules
    make the E4M3 code directly: no other P exists), so their output is a convex combination
    of V's rows."""
    return ref_rule == "running" and P_RULE_TABLE[p_rule].family == "exact"


def check_rules(p_rule: str, ref_rule: str) -> None:
    if p_rule not in P_RULES:
        raise ValueError(f"p_rule must be one of {P_RULES}, got {p_rule!r}")
    if ref_rule not in REF_RULES:
        raise ValueError(f"ref_rule must be one of {REF_RULES}, got {ref_rule!r}")


def run_steps(rule: PRule, y: torch.Tensor, fused: bool = True) -> torch.Tensor:
    """The rule's steps on float32 y in its working precision; returns w = code + magic (float64
    for half rules, float32 otherwise). ``fused=False``: fma rounds twice (Triton's interpreter)."""
    half = rule.family == "half"
    env = {"y": y.double() if half else y}

    def value(a):
        if isinstance(a, str):
            return env[a]
        return torch.tensor(a, dtype=torch.float64 if half else torch.float32)

    rnd = round_f16 if half else (lambda x: x)
    fma = fma16 if half else fma32
    for s in rule.steps:
        x = [value(a) for a in s.args]
        if s.op == "round":
            r = round_f16(x[0])
        elif s.op == "max":
            r = torch.maximum(x[0], x[1])
        elif s.op == "add":
            r = rnd(x[0] + x[1])
        elif s.op == "sub":
            r = rnd(x[0] - x[1])
        elif s.op == "fma":
            r = fma(x[0], x[1], x[2], fused)
        else:
            raise ValueError(f"unknown step op {s.op!r}")
        env[s.out] = r
    return env["w"]


def p_bits(y: torch.Tensor, rule: str, fused: bool = True) -> torch.Tensor:
    """E4M3 bits (int32) of the probability 2^(y + 8) under a P rule; y is float32 (t - r)."""
    if rule not in P_RULE_TABLE:
        raise ValueError(f"p_rule must be one of {P_RULES}, got {rule!r}")
    r = P_RULE_TABLE[rule]
    y = y.to(torch.float32) if isinstance(y, torch.Tensor) else torch.tensor(y, dtype=torch.float32)
    if r.family == "exact":
        return e4m3_encode_nonneg(torch.exp2(y.double() + P_OFFSET_LOG2))
    return (run_steps(r, y, fused).double() - r.magic).to(torch.int32)


def p_values(y: torch.Tensor, rule: str, fused: bool = True) -> torch.Tensor:
    """The probability 2^(y + 8) as rounded by the rule, as float64 (E4M3 values)."""
    return e4m3_decode(p_bits(y, rule, fused))
