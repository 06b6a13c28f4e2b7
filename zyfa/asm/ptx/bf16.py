"""The block step of the generated Hopper kernel for 16-bit inputs (BF16 and FP16): the
online softmax of FlashAttention, not the FP8 spec's. Per key block: S = Q K^T (wgmma k16,
both operands K-major, in emit_scores), mask, row max m on S (c > 0), the running reference
A = max(A, m c), P = 2^(S c - A) by MUFU in float32, the thread's part of the row sums of
that float P (summed over the quad once, in the epilogue), P rounded to the input type in
pairs, which are the A operand of P V as they stand (a 16-bit A fragment holds the columns
of the accumulator fragment), and P V accumulated in place into the output after it is
rescaled by 2^(A_old - A). V is read as stored: MN-major B, no transpose."""
from __future__ import annotations

import dataclasses

from ..program import Program, Reg
from .scores import emit_band_mask, emit_row_max
from .cta import Cta, Rows
from .fragments import acc_row_half
from .layout import COLUMN_TILE
from .smem import emit_descriptor


@dataclasses.dataclass(frozen=True)
class Softmax16:
    p: list[Reg]             # P in float32, in accumulator order (emit_pack16 makes the A operand)
    l_blk: list[Reg]         # the thread's part of the rows' sums of P (rows g, g + 8)
    alpha: list[Reg]         # 2^(A - A_new): the output's and the row sums' factor
    A_new: list[Reg]         # the rows' references after this block


def emit_softmax16(prog: Program, c: Cta, rows: Rows, start_n: Reg, s: list[Reg], A: list[Reg],
                   tag: str = "", masked: bool = True) -> Softmax16:
    """Mask (in the blocks that need it; ``masked`` False: a block below the band, no test),
    row max, reference, P in float32 and its row sums."""
    emit = prog.emit
    fac = rows.fac
    if masked:
        emit_band_mask(prog, c, rows, s, start_n, tag)

    prog.comment("row max of S c, taken on S (c > 0), the running reference A")
    m, neg, A_new, alpha, diff = (prog.regs("f32", 2) for _ in range(5))
    for half in (0, 1):
        emit_row_max(prog, s, fac, half, m[half], floor=False)      # A >= NEG_FLOOR: A_new is floored
        emit("max.nan.f32", A_new[half], A[half], m[half])
        emit("sub.f32", diff[half], A[half], A_new[half])
        emit("ex2.f32", alpha[half], diff[half])
        emit("neg.f32", neg[half], A_new[half])

    prog.comment("P = 2^(S c - A) in float32, its row sums (four chains a row)")
    p = []
    for i, si in enumerate(s):
        y = prog.reg("f32")
        emit("fma.f32", y, si, fac, neg[acc_row_half(i)])
        emit("ex2.f32", y, y)
        p.append(y)
    l_blk = prog.regs("f32", 2)
    for half in (0, 1):
        regs = [pi for i, pi in enumerate(p) if acc_row_half(i) == half]
        chains = prog.regs("f32", 4)
        for k in range(4):
            emit("add.f32", chains[k], regs[k], regs[k + 4])
        for i, pi in enumerate(regs[8:]):
            emit("add.f32", chains[i % 4], chains[i % 4], pi)
        emit("add.f32", chains[0], chains[0], chains[1])
        emit("add.f32", chains[2], chains[2], chains[3])
        emit("add.f32", l_blk[half], chains[0], chains[2])
    return Softmax16(p, l_blk, alpha, A_new)


def emit_pack16(prog: Program, c: Cta, p: list[Reg], p_regs: list[list[Reg]]) -> None:
    """P rounded to the input type in pairs, into ``p_regs`` (the A operand of P V: 8 k-steps
    of 16 keys x 4 words); called once the P V that reads them last has completed."""
    convert = "cvt.f16x2.f32" if c.layout.dtype == "f16" else "cvt.bf16x2.f32"
    for t, words in enumerate(p_regs):   # keys 16 t ..: accumulator registers 8 t .. 8 t + 7
        for r in range(4):
            prog.emit(convert, words[r], p[8 * t + 2 * r + 1], p[8 * t + 2 * r])   # the odd column high


def emit_pv16(prog: Program, c: Cta, p_regs: list[list[Reg]], v_tile: Reg, total: list[Reg],
              accumulate: Reg | None = None) -> None:
    """Issue (and commit) total += P V from the V tile at ``v_tile`` (its column tiles of
    block_n keys x 64 elements are the MN-major B's leading dimension). ``accumulate``
    false: total = P V (a tile's first block, whose total holds the last tile's output)."""
    emit = prog.emit
    dtype, dv = c.layout.dtype, c.layout.dv
    block_n = c.layout.block_n
    dv_desc = emit_descriptor(prog, v_tile, leading_bytes=block_n * COLUMN_TILE)
    prog.comment("total += P V")
    t_list = ", ".join(map(str, total))
    emit("wgmma.fence")
    for t in range(block_n // 16):
        bk = prog.reg("u64")
        emit("add.u64", bk, dv_desc, 128 * t)                 # 16 keys: 2,048 bytes
        scale_d = accumulate if t == 0 and accumulate is not None else c.accumulate
        emit(f"wgmma.m64n{dv}k16.{dtype}.rs.t", t_list, ", ".join(map(str, p_regs[t])), bk, scale_d)
    emit("wgmma.commit")


def emit_row_update16(prog: Program, sm: Softmax16, l: list[Reg], A: list[Reg]) -> None:
    """l = l * alpha + l_blk (the thread's parts); the reference moves to A_new."""
    for half in (0, 1):
        prog.emit("fma.f32", l[half], l[half], sm.alpha[half], sm.l_blk[half])
        prog.emit("mov.f32", A[half], sm.A_new[half])
