"""The INT8 Q.K^T mode in the serial kernel (Layout.int8_qk): S = Q K^T by the int8 tensor
cores into int32, made float exactly, and each block's factors, a row's factor times the key
block's descale (the spec's per-token factor when k's descales are constant over a block of
128 keys, as quantize_int8_qk makes them). The rest of the block step is the FP8 kernel's.

The scores are exact integers, |S| <= 256 * 127 * 127 < 2^22 up to head dim 256, so the bits
of S + 0x4B400000 are the float 1.5 * 2^23 + S, and subtracting 1.5 * 2^23 leaves S exactly:
two full-rate instructions a score where the conversion instruction runs at a quarter rate.
Where registers allow (int_row_max), the softmax takes the row max on the integers (ptxas
fuses the chain into three-input integer max instructions; exact, so the same bits) and
converts the scores after it; masked scores then hold MASKED_SCORE, below every score, whose
conversion gives -inf, the float mask's value.
"""
from __future__ import annotations

from ...spec.constants import MAGIC, MAGIC_BITS
from ..program import Program, Reg
from .cta import Rows
from .fragments import acc_row_half
from .layout import HEAD_DIM, Layout
from .target import f32

# the int32 whose conversion (emit_float_scores) is -inf: (0xFF800000 - MAGIC_BITS) mod 2^32
MASKED_SCORE = f"0x{(0xFF800000 - MAGIC_BITS) % 2**32:08X}"


def int_row_max(layout: Layout) -> bool:
    """Whether the row max is taken on the int32 scores: in the INT8 mode, but for Dv 256,
    where the integer max's registers spill inside the block loop."""
    return layout.int8_qk and layout.dv <= HEAD_DIM


def emit_float_scores(prog: Program, s: list[Reg]) -> None:
    """The int32 scores ``s`` (.b32 registers) as float32, in place, exactly."""
    for si in s:
        prog.emit("add.u32", si, si, MAGIC_BITS)
        prog.emit("sub.f32", si, si, f32(MAGIC))


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
    """The two rows' factors for key block ``j``: row factor * the block's k descale."""
    emit = prog.emit
    off, addr = prog.regs("u64", 2)
    kb = prog.reg("f32")
    emit("mul.wide.u32", off, j, 4)
    emit("add.u64", addr, rows.kfac_base, off)
    emit("ld.global.f32", kb, addr)
    facs = prog.regs("f32", 2)
    for half in (0, 1):
        emit("mul.f32", facs[half], rows.row_fac[half], kb)
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
