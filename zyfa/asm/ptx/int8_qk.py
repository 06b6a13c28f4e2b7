"""The INT8 Q.K^T mode in the serial kernel (Layout.int8_qk): S = Q K^T by the int8 tensor
cores into int32, made float exactly, and each block's factors, a row's factor times the key
block's descale (the spec's per-token factor when k's descales are constant over a block of
128 keys, as quantize_int8_qk makes them). The rest of the block step is the FP8 kernel's.

The scores are exact integers, |S| <= 128 * 127 * 127 < 2^22 at head dim 128, so the bits of
S + 0x4B400000 are the float 1.5 * 2^23 + S, and subtracting 1.5 * 2^23 leaves S exactly:
two full-rate instructions a score where the conversion instruction runs at a quarter rate.
"""
from __future__ import annotations

from ...spec.constants import MAGIC, MAGIC_BITS
from ..program import Program, Reg
from .cta import Rows
from .fragments import acc_row_half
from .target import f32


def emit_float_scores(prog: Program, s: list[Reg]) -> None:
    """The int32 scores ``s`` (.b32 registers) as float32, in place, exactly."""
    for si in s:
        prog.emit("add.u32", si, si, MAGIC_BITS)
        prog.emit("sub.f32", si, si, f32(MAGIC))


def emit_int8_scores(prog: Program, s: list[Reg], facs: list[Reg], tag: str) -> None:
    """Once S is done: the int32 scores as floats (emit_float_scores), rows with negative
    factors flipped (emit_positive_rows)."""
    emit_float_scores(prog, s)
    emit_positive_rows(prog, s, facs, tag)


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
    """Make each row's factor >= 0, which the row max on S and the mask's -inf need: where it
    is negative, S -> -S and c -> -c (t = S c and fma(S, c, -r) unchanged, exactly). A branch
    the warp skips unless one of its rows has a negative descale."""
    emit = prog.emit
    negative = prog.regs("pred", 2)
    either, any_negative = prog.regs("pred", 2)
    for half in (0, 1):
        emit("setp.lt.f32", negative[half], facs[half], f32(0.0))
    emit("or.pred", either, negative[0], negative[1])
    emit("vote.any", any_negative, either)
    emit("bra", f"FACTORS_POSITIVE{tag}", guard=f"!{any_negative}")
    for i, si in enumerate(s):
        emit("neg.f32", si, si, guard=negative[acc_row_half(i)])
    for half in (0, 1):
        emit("neg.f32", facs[half], facs[half], guard=negative[half])
    prog.label(f"FACTORS_POSITIVE{tag}")
