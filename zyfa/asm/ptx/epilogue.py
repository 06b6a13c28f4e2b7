"""The epilogue of the generated Hopper kernel: out = total / l * v_descale in BF16 and
LSE = ln2 (A + log2 l - 8), for the thread's two rows (16-bit inputs: out = total / l in the
input type, LSE = ln2 (A + log2 l), l summed over the quad first)."""
from __future__ import annotations

import dataclasses

from ...spec.constants import LN2, P_OFFSET_LOG2
from ..program import Program, Reg
from .block import emit_quad_reduce
from .cta import Cta, Rows
from .target import f32


@dataclasses.dataclass(frozen=True)
class Targets:
    """Where the epilogue writes the thread's two rows g and g + 8 (the second's places
    follow from the first's): whether a row is inside the sequence, and row g's elements in
    out and LSE."""
    inside: list[Reg]       # pred: row < seqlen_q
    out_elem: Reg           # u32: row g's first element this thread stores (+ 8q columns)
    lse_elem: Reg           # u32: row g's LSE


def emit_epilogue(prog: Program, c: Cta, rows: Rows, total: list[Reg], A: list[Reg], l: list[Reg]) -> None:
    """out = total / l * v_descale (BF16), LSE = ln2 (A + log2 l - 8); rows past seqlen_q skipped.
    16-bit inputs: ``l`` holds the thread's part of each row sum; out = total / l."""
    emit_epilogue_values(prog, c, emit_epilogue_targets(prog, c, rows), rows.vd_base, total, A, l)


def emit_epilogue_targets(prog: Program, c: Cta, rows: Rows) -> Targets:
    """The addresses of the tile's rows (from the tile's and rows' registers, which a
    persistent consumer may then overwrite with its next tile's before the values)."""
    emit = prog.emit
    into = Targets(prog.regs("pred", 2), prog.reg("u32"), prog.reg("u32"))
    p, t, q = c.params, c.tile, c.thread.q
    dv = c.layout.dv
    ok, idx = into.inside, into.out_elem
    seq = t.seq                                   # a packed batch: the sequence's rows from q_row0
    seqlen_q = seq.q_len if seq else p.seqlen_q
    for half in (0, 1):
        emit("setp.lt.u32", ok[half], rows.rows[half], seqlen_q)
    if seq:
        emit("add.u32", idx, seq.q_row0, rows.rows[0])
    else:
        emit("mad.lo.u32", idx, t.b, p.seqlen_q, rows.rows[0])
    emit("mad.lo.u32", idx, idx, p.heads, t.h)               # (b * Sq + row) * Hq + h
    emit("mul.lo.u32", idx, idx, dv)
    emit("mad.lo.u32", idx, q, 8, idx)                       # + 8q: the quad's transposed words (below)
    lse = into.lse_elem                           # LSE (B, Hq, Sq); packed: layout.PACKED_PARAMS
    if seq:
        emit("mul.lo.u32", lse, t.h, p.packed.lse_head_stride)
        emit("mad.lo.u32", lse, seq.q_row0, p.packed.lse_row_scale, lse)
    else:
        emit("mad.lo.u32", lse, t.b, p.heads, t.h)
        emit("mul.lo.u32", lse, lse, p.seqlen_q)
    emit("add.u32", lse, lse, rows.rows[0])
    return into


def emit_epilogue_values(prog: Program, c: Cta, to: Targets, vd_base: Reg | None, total: list[Reg], A: list[Reg],
                         l: list[Reg]) -> None:
    """out and LSE of the tile's rows to ``to`` (FP8: times the v descales from ``vd_base``)."""
    emit = prog.emit
    q = c.thread.q
    fp8 = c.layout.is_fp8
    if not fp8:
        for half in (0, 1):
            emit_quad_reduce(prog, l[half], "add.f32")
    inv, lg = prog.regs("f32", 2), prog.regs("f32", 2)
    for half in (0, 1):
        emit("rcp.f32", inv[half], l[half])
    convert = "cvt.f16x2.f32" if c.layout.dtype == "f16" else "cvt.bf16x2.f32"
    words = ([], [])                              # per row: columns 8 jb + 2q, + 1 as one word, jb = 0, 1, ...
    for jb in range(len(total) // 4):
        if fp8:
            vd = prog.regs("f32", 2)
            addr = prog.reg("u64")
            emit("add.u64", addr, vd_base, 4 * 8 * jb)
            emit("ld.global.v2.f32", vd[0], vd[1], addr)
        for half in (0, 1):
            vals = prog.regs("f32", 2)
            for e in (0, 1):
                emit("mul.f32", vals[e], total[4 * jb + 2 * half + e], inv[half])
                if fp8:
                    emit("mul.f32", vals[e], vals[e], vd[e])
            packed = prog.reg("b32")
            emit(convert, packed, vals[1], vals[0])            # high half: the odd column
            words[half].append(packed)
    up = prog.regs("pred", 2)                     # the thread's quad lane has bit 1 / bit 0 set
    for bit, pred in zip((2, 1), up):
        lane_bit = prog.reg("u32")
        emit("and.b32", lane_bit, q, bit)
        emit("setp.gt.u32", pred, lane_bit, 0)
    out_rows = prog.regs("u64", 2)                # row g + 8: 8 Hq Dv elements further
    emit("mul.wide.u32", out_rows[0], to.out_elem, 2)
    emit("add.u64", out_rows[0], c.params.out, out_rows[0])
    emit("mul.wide.u32", out_rows[1], c.params.heads, 8 * c.layout.dv * 2)
    emit("add.u64", out_rows[1], out_rows[0], out_rows[1])
    for half in (0, 1):
        for i in range(len(words[half]) // 4):    # each thread: the 16 bytes of column group 4i + q
            quad = emit_transpose_quad(prog, words[half][4 * i:4 * i + 4], up)
            dst = prog.reg("u64")
            emit("add.u64", dst, out_rows[half], 2 * 8 * 4 * i)
            emit("st.global.v4.b32", dst, *quad, guard=to.inside[half])

    prog.comment("LSE from the first thread of each quad")
    first, store = prog.reg("pred"), prog.regs("pred", 2)
    emit("setp.eq.u32", first, q, 0)
    lse = prog.regs("u64", 2)                     # row g + 8: 8 floats further
    emit("mul.wide.u32", lse[0], to.lse_elem, 4)
    emit("add.u64", lse[0], c.params.lse, lse[0])
    emit("add.u64", lse[1], lse[0], 32)
    for half in (0, 1):
        emit("and.pred", store[half], to.inside[half], first)
        emit("lg2.f32", lg[half], l[half])
        emit("add.f32", lg[half], lg[half], A[half])
        if fp8:
            emit("sub.f32", lg[half], lg[half], f32(float(P_OFFSET_LOG2)))
        emit("mul.f32", lg[half], lg[half], f32(LN2))
        emit("st.global.f32", lse[half], lg[half], guard=store[half])


def emit_transpose_quad(prog: Program, w: list[Reg], up: list[Reg]) -> list[Reg]:
    """Word k of quad lane l becomes word l of lane k (two butterfly exchanges, at lane
    distance 2 then 1): lane q then holds a row's columns 8 (4i + q) .. + 7 in order, one
    16-byte store instead of four 4-byte ones. ``up``: the lane's bit 1 and bit 0 set."""
    emit = prog.emit
    w = list(w)
    for dist, is_up in zip((2, 1), up):
        for k in (k for k in range(4) if not k & dist):
            k2 = k | dist
            send, recv, lo, hi = prog.regs("b32", 4)
            emit("selp.b32", send, w[k], w[k2], is_up)      # the lower lane gives its upper word
            emit("shfl.bfly", recv, send, dist)
            emit("selp.b32", lo, recv, w[k], is_up)
            emit("selp.b32", hi, w[k2], recv, is_up)
            w[k], w[k2] = lo, hi
    return w
