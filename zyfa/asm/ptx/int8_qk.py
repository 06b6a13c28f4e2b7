"""The INT8 Q.K^T mode in the generated kernels (Layout.int8_qk): S = Q K^T by the int8 tensor
cores into int32, and each block's factors, a row's factor times the key block's descale (the
spec's per-token factor when k's descales are constant over a block of 128 keys, as
quantize_int8_qk makes them), with two low bits cleared (spec.int8_grid). The rest of the
block step is the FP8 kernel's.

The scores are exact integers, |S| <= 256 * 127 * 127 < 2^22 up to head dim 256, so the bits
of S + 0x4B400000 are the float R = M + S (M = 1.5 * 2^23), one integer add a score where
the conversion instruction runs at a quarter rate. The FFMA takes R as it is: the block max
lies on M c's grid (spec.int8_grid; M c exact), X = M c + r a float32, and fma(R, c, -X) is
fma(S, c, -r). Where registers allow (int_row_max), the softmax takes the row max on the
integers (ptxas fuses the chain into three-input integer max instructions; exact, so the same
bits) and biases the scores after it; masked scores then hold MASKED_SCORE, below every
score, whose R is -inf, the float mask's value.
"""
from __future__ import annotations

from ...spec.constants import MAGIC, MAGIC_BITS, NEG_FLOOR, P_OFFSET_LOG2
from ..program import Program, Reg
from .cta import Rows
from .fragments import acc_row_half
from .layout import HEAD_DIM, Layout
from .target import f32

# the int32 whose R (emit_biased_scores) is -inf: (0xFF800000 - MAGIC_BITS) mod 2^32
MASKED_SCORE = f"0x{(0xFF800000 - MAGIC_BITS) % 2**32:08X}"


def int_row_max(layout: Layout) -> bool:
    """Whether the row max is taken on the int32 scores: in the INT8 mode, but for Dv 256,
    where the integer max's registers spill inside the block loop."""
    return layout.int8_qk and layout.dv <= HEAD_DIM


def emit_biased_scores(prog: Program, s: list[Reg]) -> None:
    """The int32 scores ``s`` (.b32 registers) as the float32 R = M + S, in place, exactly."""
    for si in s:
        prog.emit("add.u32", si, si, MAGIC_BITS)


def emit_grid_max(prog: Program, fac: Reg, m: Reg, all_masked: Reg | None) -> None:
    """The row's max S (``m``, -inf where fully masked; c = ``fac`` > 0) as spec.int8_grid's
    reference: X = RU(M c + max(S) c) in one FMA (max(S) c is the products' max, exactly), m =
    X - M c (exact), floored at NEG_FLOOR after. A fully masked row (predicate ``all_masked``)
    keeps -inf, which c = 0 or a non-finite c would make NaN."""
    x, mc = prog.regs("f32", 2)
    prog.emit("mul.f32", mc, f32(MAGIC), fac)
    prog.emit("fma.rp.f32", x, m, fac, mc)
    prog.emit("sub.f32", m, x, mc)
    if all_masked is not None:
        prog.emit("mov.f32", m, f32(float("-inf")), guard=all_masked)
    prog.emit("max.nan.f32", m, m, f32(NEG_FLOOR))


def emit_grid_addend(prog: Program, fac: Reg, m: Reg, exact: bool) -> Reg:
    """The FFMA's addend beside R = M + S: -X, or for the exact rule RD(8 - X) (y + 8 <= 8 where
    8 - X is no float32). X is rebuilt from the floored max, X = m + M c (exact but in a fully
    masked row, whose y is masked again): kept from emit_grid_max instead, X beside m through
    the block spilled at Dv 256."""
    x, mc, addend = prog.regs("f32", 3)
    prog.emit("mul.f32", mc, f32(MAGIC), fac)
    prog.emit("add.f32", x, m, mc)
    if exact:
        prog.emit("sub.rm.f32", addend, f32(float(P_OFFSET_LOG2)), x)
    else:
        prog.emit("neg.f32", addend, x)
    return addend


def emit_int_row_max(prog: Program, s: list[Reg], m: Reg) -> None:
    """m = the max of the int32 scores ``s`` (one row's registers) over the thread's quad, as
    float32 (-inf where all are MASKED_SCORE)."""
    emit = prog.emit
    mi = prog.reg("b32")
    emit("max.s32", mi, s[0], s[1])
    for si in s[2:]:
        emit("max.s32", mi, mi, si)
    other = prog.reg("b32")
    for lane_mask in (1, 2):
        emit("shfl.bfly", other, mi, lane_mask)
        emit("max.s32", mi, mi, other)
    emit("add.u32", mi, mi, MAGIC_BITS)
    emit("sub.f32", m, mi, f32(MAGIC))


def emit_block_factors(prog: Program, rows: Rows, j: Reg) -> list[Reg]:
    """The two rows' factors for key block ``j``: row factor * the block's k descale, its two
    lowest significand bits cleared."""
    emit = prog.emit
    off, addr = prog.regs("u64", 2)
    kb = prog.reg("f32")
    emit("mul.wide.u32", off, j, 4)
    emit("add.u64", addr, rows.kfac_base, off)
    emit("ld.global.f32", kb, addr)
    facs = prog.regs("f32", 2)
    for half in (0, 1):
        emit("mul.f32", facs[half], rows.row_fac[half], kb)
        emit("and.b32", facs[half], facs[half], "0xFFFFFFFC")      # M c exact (spec.int8_grid)
    return facs


def emit_positive_rows(prog: Program, s: list[Reg], facs: list[Reg], tag: str) -> None:
    """Once S is done (still int32), make each row's factor >= 0, which the row max on S and
    the mask need: where it is negative, S -> -S and c -> -c (t = S c and fma(S, c, -r)
    unchanged, exactly). A branch the warp skips unless one of its rows has a negative descale."""
    emit = prog.emit
    negative = prog.regs("pred", 2)
    either, any_negative = prog.regs("pred", 2)
    for half in (0, 1):
        emit("setp.lt.f32", negative[half], facs[half], f32(0.0))
    emit("or.pred", either, negative[0], negative[1])
    emit("vote.any", any_negative, either)
    emit("bra", f"FACTORS_POSITIVE{tag}", guard=f"!{any_negative}")
    for i, si in enumerate(s):
        emit("neg.s32", si, si, guard=negative[acc_row_half(i)])
    for half in (0, 1):
        emit("neg.f32", facs[half], facs[half], guard=negative[half])
    prog.label(f"FACTORS_POSITIVE{tag}")
