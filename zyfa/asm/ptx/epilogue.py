"""The epilogue of the generated Hopper kernel: out = total / l * v_descale in BF16 and
LSE = ln2 (A + log2 l - 8), for the thread's two rows (16-bit inputs: out = total / l in the
input type, LSE = ln2 (A + log2 l), l summed over the quad first)."""
from __future__ import annotations

import dataclasses

from ...spec.constants import LN2, P_OFFSET_LOG2
from ..program import Program, Reg
from .scores import emit_quad_reduce
from .cta import Cta, Rows
from .target import f32


@dataclasses.dataclass(frozen=True)
class Targets:
    """Where the epilogue writes the thread's two rows g and g + 8 (the second's places
    follow from the first's): whether a row is inside the sequence, and row g's elements in
    out and LSE."""
    inside: list[Reg]       # pred: row < seqlen_q
    out_elem: Reg           # u32: the first element of out this thread stores: row g's, + 8q columns;
    #                         staged (Layout.o_staging): row (warp's first + lane / L), column 8 (lane % L)
    lse_elem: Reg           # u32: row g's LSE
    rows_left: Reg | None = None   # staged: seqlen_q - out_elem's row (s32)


def emit_epilogue(prog: Program, c: Cta, rows: Rows, total: list[Reg], A: list[Reg], l: list[Reg]) -> None:
    """out = total / l * v_descale (BF16), LSE = ln2 (A + log2 l - 8); rows past seqlen_q skipped.
    16-bit inputs: ``l`` holds the thread's part of each row sum; out = total / l."""
    emit_epilogue_values(prog, c, emit_epilogue_targets(prog, c, rows), rows.vd_base, total, A, l)


def emit_epilogue_targets(prog: Program, c: Cta, rows: Rows) -> Targets:
    """The addresses of the tile's rows (from the tile's and rows' registers, which a
    persistent consumer may then overwrite with its next tile's before the values)."""
    emit = prog.emit
    staged = c.layout.o_staging is not None
    into = Targets(prog.regs("pred", 2), prog.reg("u32"), prog.reg("u32"), prog.reg("u32") if staged else None)
    p, t, q = c.params, c.tile, c.thread.q
    dv = c.layout.dv
    ok, idx = into.inside, into.out_elem
    seq = t.seq                                   # a packed batch: the sequence's rows from q_row0
    seqlen_q = seq.q_len if seq else p.seqlen_q
    for half in (0, 1):
        emit("setp.lt.u32", ok[half], rows.rows[half], seqlen_q)
    row, col = rows.rows[0], q
    if staged:                                    # lane l stores row l / L's 16-byte piece l % L
        lanes_a_row = dv // 8
        lane, row, col = prog.regs("u32", 3)
        emit("mad.lo.u32", lane, c.thread.g, 4, q)
        emit("shr.u32", row, lane, lanes_a_row.bit_length() - 1)
        emit("sub.u32", row, row, c.thread.g)
        emit("add.u32", row, row, rows.rows[0])              # the warp's first row + lane / L
        emit("and.b32", col, lane, lanes_a_row - 1)
        emit("sub.s32", into.rows_left, seqlen_q, row)
    if seq:
        emit("add.u32", idx, seq.q_row0, row)
    else:
        emit("mad.lo.u32", idx, t.b, p.seqlen_q, row)
    emit("mad.lo.u32", idx, idx, p.heads, t.h)               # (b * Sq + row) * Hq + h
    emit("mul.lo.u32", idx, idx, dv)
    emit("mad.lo.u32", idx, col, 8, idx)                     # + 8 col: this lane's 16 bytes
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
    if c.layout.o_staging is not None:
        _emit_out_through_shared(prog, c, to, words)
    else:
        _emit_out_by_shuffles(prog, c, to, words)

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


def _emit_out_by_shuffles(prog: Program, c: Cta, to: Targets, words: tuple[list[Reg], list[Reg]]) -> None:
    """out's rows g and g + 8 from the thread's words: each quad transposed in registers
    (emit_transpose_quad), then 16 bytes a thread."""
    emit = prog.emit
    up = prog.regs("pred", 2)                     # the thread's quad lane has bit 1 / bit 0 set
    for bit, pred in zip((2, 1), up):
        lane_bit = prog.reg("u32")
        emit("and.b32", lane_bit, c.thread.q, bit)
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


def _emit_out_through_shared(prog: Program, c: Cta, to: Targets, words: tuple[list[Reg], list[Reg]]) -> None:
    """out's 16 rows of the warp through its own 16 rows of shared memory (Layout.o_staging):
    stmatrix writes the fragment's 8 x 8 tiles, each row's 16-byte pieces swizzled (piece k of
    row r at k ^ (r % 8): a tile's 8 rows in different banks), then L lanes a row read and store
    16 bytes each, 32 / L rows at a time."""
    emit = prog.emit
    th, dv = c.thread, c.layout.dv
    row_bytes, lanes_a_row = 2 * dv, dv // 8
    rows_at_once = 32 // lanes_a_row
    first, stride = c.layout.o_staging
    lane, rows_base = prog.regs("u32", 2)          # (the targets' lane again: not held past a next tile's start)
    emit("mad.lo.u32", lane, th.g, 4, th.q)
    emit("mad.lo.u32", rows_base, th.wg, stride, c.shared.base)     # consumer wg's rows: wg - 1 = 0, 1, ...
    emit("add.u32", rows_base, rows_base, (first - stride) & 0xFFFFFFFF)
    emit("mad.lo.u32", rows_base, th.warp, 16 * row_bytes, rows_base)

    prog.comment("out through shared memory: the fragment's tiles by stmatrix")
    emit("fence.proxy.async")                    # (the rows may be a Q tile the wgmmas read)
    emit("bar.warp.sync")                        # (and the warp's last tile's rows read back)
    row, x = prog.regs("u32", 2)                 # lane: tile lane / 8's row lane % 8, piece + lane / 16
    emit("and.b32", row, lane, 15)
    emit("shr.u32", x, lane, 4)
    emit("xor.b32", x, x, row)
    emit("and.b32", x, x, 7)                     # (piece jb + lane / 16) ^ (row % 8) = jb ^ x, jb even
    emit("shl.b32", x, x, 4)
    emit("mad.lo.u32", row, row, row_bytes, rows_base)
    for jb in range(0, dv // 8, 2):
        at = prog.reg("u32")
        emit("xor.b32", at, x, 16 * (jb % 8))
        emit("add.u32", at, at, row)
        emit("stmatrix.x4", f"{at}+{16 * (jb - jb % 8)}",
             words[0][jb], words[1][jb], words[0][jb + 1], words[1][jb + 1])
    emit("bar.warp.sync")

    prog.comment(f"then {rows_at_once} row(s) at a time, 16 bytes a lane")
    r0, y = prog.regs("u32", 2)
    emit("shr.u32", r0, lane, lanes_a_row.bit_length() - 1)
    emit("and.b32", y, lane, lanes_a_row - 1)
    emit("xor.b32", y, y, r0)                    # row R i + r0 has (R i) % 8 ^ r0 as its row % 8
    emit("shl.b32", y, y, 4)
    emit("mad.lo.u32", r0, r0, row_bytes, rows_base)
    dst, step = prog.regs("u64", 2)
    emit("mul.wide.u32", dst, to.out_elem, 2)
    emit("add.u64", dst, c.params.out, dst)
    emit("mul.wide.u32", step, c.params.heads, rows_at_once * dv * 2)
    for i in range(16 // rows_at_once):
        src, inside = prog.reg("u32"), prog.reg("pred")
        vals = prog.regs("b32", 4)
        emit("xor.b32", src, y, 16 * ((rows_at_once * i) % 8))
        emit("add.u32", src, src, r0)
        emit("ld.shared.v4.b32", *vals, f"{src}+{rows_at_once * i * row_bytes}")
        emit("setp.gt.s32", inside, to.rows_left, rows_at_once * i)
        emit("st.global.v4.b32", dst, *vals, guard=inside)
        if i + 1 < 16 // rows_at_once:
            emit("add.u64", dst, dst, step)


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
