"""Sliding-window attention in the generated Hopper kernels (Layout.window): FlashAttention's
window_size (left, right) as kernel parameters (layout.WINDOW_PARAMS), bottom-right aligned as
zyfa.spec.reference.key_limits has it: query row i sees keys i + o - left <= j <= i + o + right,
o = seqlen_k - seqlen_q (a packed batch: the sequence's).

A tile reads the key blocks some row of its CTA sees and no other: n_blocks of them from
first_block. The producer and the consumers number them alike, from 0 (load numbers and the
loops' block counters are relative; loads.emit_first_key adds the first key). Each
warpgroup's blocks fall in three parts, the Triton kernel's (triton_kernels.attention.block_bounds):
the masked left band [first key, left_end), where the window's lower edge cuts some row; the
unmasked blocks [left_end, band_start), which the loops' copy below the band runs without a
mask; the masked band [band_start, end) of the upper edge (causal: the diagonal) and the keys'
tail. A masked block's mask tests both edges (emit_window_mask).

Validation gives every query row a key, so only rows past a tile's queries see none: their
l stays 0 and the epilogue does not store them. The spec's fully masked rows (0 / 0) would
come out as its NaN output and -inf LSE, as the kernels compute them today."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ..program import Program, Reg
from .fragments import acc_key, acc_row_half, key_lanes
from .layout import BLOCK_M, Layout

if TYPE_CHECKING:
    from .cta import Cta, Rows, Tile


@dataclasses.dataclass(frozen=True)
class Window:
    """A windowed tile's register (the window's bounds are read from the parameters where
    they are used, which keeps them out of the loops' registers)."""
    first_block: Reg        # the tile's first key block


def emit_window_registers(prog: Program, layout: Layout) -> Window | None:
    """The tile's window register (emit_block_range writes it)."""
    return Window(prog.reg("u32")) if layout.window else None


def _bounds(prog: Program) -> tuple[Reg, Reg]:
    """(left, right): keys a row sees before its diagonal key (unbounded: the host's seqlen_q +
    seqlen_k) and after it (causal: 0)."""
    left, right = prog.regs("u32", 2)
    prog.emit("ld.param.u32", left, "window_left")
    prog.emit("ld.param.u32", right, "window_right")
    return left, right


def emit_block_range(prog: Program, t: Tile, seqlen_k: Reg, cta_rows: int) -> None:
    """The tile's key blocks (rows tile_m .. tile_m + cta_rows - 1): from the block of its first
    row's first key to the block of its last row's last key (capped at seqlen_k); at least one,
    as the producer and the consumers take a tile's first block before they test the count."""
    emit, w = prog.emit, t.window
    shift = t.block_n.bit_length() - 1
    left, right = _bounds(prog)
    lo, end = prog.regs("u32", 2)
    emit("add.u32", lo, t.tile_m, t.diag)
    emit("sub.u32", lo, lo, left)
    emit("max.s32", lo, lo, 0)
    emit("shr.u32", w.first_block, lo, shift)
    emit("add.u32", end, t.tile_m, t.diag)
    emit("add.u32", end, end, right)
    emit("add.u32", end, end, cta_rows)                   # past the last row's last key
    emit("min.s32", end, end, seqlen_k)
    emit("add.u32", end, end, t.block_n - 1)
    emit("shr.s32", end, end, shift)
    emit("sub.u32", t.n_blocks, end, w.first_block)
    emit("max.s32", t.n_blocks, t.n_blocks, 1)


def emit_row_window(prog: Program, t: Tile, rows: list[Reg], limits: list[Reg], band_start: Reg,
                    kfac_base: Reg | None) -> tuple[Reg | None, Reg | None]:
    """With a window (else (None, None)): the thread's rows' last keys ``limits`` (capped at
    the last key), the warpgroup's band_start (keys below it every row sees on the right) and
    left_end (keys from it on every row sees on the left), both multiples of block_n; returns
    (the first key the thread's first row sees (signed; its second row's: 8 more), left_end).
    int8_qk: ``kfac_base`` moves to the tile's first block's descale, which the loops index
    by their block counters (relative: emit_block_factors's j)."""
    emit, start_m = prog.emit, t.start_m
    if t.window is None:
        return None, None
    if kfac_base is not None:
        off = prog.reg("u64")
        emit("mul.wide.u32", off, t.window.first_block, 4)
        emit("add.u64", kfac_base, kfac_base, off)
    left, right = _bounds(prog)
    first = prog.reg("u32")
    for row, lim in zip(rows, limits):
        emit("add.u32", lim, row, t.diag)
        emit("add.u32", lim, lim, right)
        emit("min.s32", lim, lim, t.last_key)
    emit("add.u32", first, rows[0], t.diag)
    emit("sub.u32", first, first, left)
    emit("add.u32", band_start, start_m, t.diag)          # the first row's last key + 1
    emit("add.u32", band_start, band_start, right)
    emit("add.u32", band_start, band_start, 1)
    emit("max.s32", band_start, band_start, 0)
    emit("and.b32", band_start, band_start, -t.block_n & 0xFFFFFFFF)
    emit("min.u32", band_start, band_start, t.full_end)
    left_end = prog.reg("u32")
    emit("add.u32", left_end, start_m, t.diag)            # the last row's first key, up to a block
    emit("add.u32", left_end, left_end, BLOCK_M - 1)
    emit("sub.u32", left_end, left_end, left)
    emit("max.s32", left_end, left_end, 0)
    emit("add.u32", left_end, left_end, t.block_n - 1)
    emit("and.b32", left_end, left_end, -t.block_n & 0xFFFFFFFF)
    return first, left_end


def emit_window_mask(prog: Program, c: Cta, rows: Rows, t: list[Reg], start_n: Reg,
                     fill: tuple[str, str]) -> None:
    """t = the masked value (``fill``: its move and value, scores.masked_move) where key > the
    row's limit or key < its first key."""
    q, slot = c.thread.q, c.layout.slot_keys
    reach, before = prog.regs("u32", 2), prog.regs("u32", 2)
    for half in (0, 1):
        for dst, bound in ((reach[half], rows.limits[half]), (before[half], rows.first)):
            prog.emit("sub.s32", dst, bound, start_n)
            for _ in range(key_lanes(slot)):
                prog.emit("sub.s32", dst, dst, q)         # bound - start_n - 2q (slot order: 4q)
    prog.emit("add.u32", before[1], before[1], 8)         # the second row's first key
    for i, ti in enumerate(t):
        out = prog.reg("pred")
        key = acc_key(i, slot)
        prog.emit("setp.lt.s32", out, reach[acc_row_half(i)], key)
        prog.emit("setp.gt.or.s32", out, before[acc_row_half(i)], key, out)
        prog.emit(fill[0], ti, fill[1], guard=out)


def emit_window_band_mask(prog: Program, c: Cta, rows: Rows, s: list[Reg], start_n: Reg, tag: str,
                          fill: tuple[str, str]) -> None:
    """scores.emit_band_mask with a window: mask the block at ``start_n`` unless it lies in
    [left_end, band_start)."""
    unmasked = prog.reg("pred")
    prog.emit("setp.lt.u32", unmasked, start_n, rows.band_start)
    prog.emit("setp.ge.and.u32", unmasked, start_n, rows.left_end, unmasked)
    prog.emit("bra", f"SCORES_READY{tag}", guard=unmasked)
    emit_window_mask(prog, c, rows, s, start_n, fill)
    prog.label(f"SCORES_READY{tag}")


def emit_band_test(prog: Program, rows: Rows, start_n: Reg, band: Reg) -> None:
    """``band``: the block at ``start_n`` needs the mask, from band_start on (or, with a window,
    before left_end): the loops take it in their masked copy."""
    prog.emit("setp.ge.u32", band, start_n, rows.band_start)
    if rows.left_end is not None:
        prog.emit("setp.lt.or.u32", band, start_n, rows.left_end, band)


def emit_below_again(prog: Program, rows: Rows, start_n: Reg, label: str) -> None:
    """A window's masked copy of the loop, after its block counter moved on: back to the copy
    below the band (``label``) once start_n has left the left band for [left_end, band_start).
    Nothing without a window (the masked copy runs to the end)."""
    if rows.left_end is None:
        return
    below = prog.reg("pred")
    prog.emit("setp.lt.u32", below, start_n, rows.band_start)
    prog.emit("setp.ge.and.u32", below, start_n, rows.left_end, below)
    prog.emit("bra", label, guard=below)


def emit_left_band_jump(prog: Program, rows: Rows, start_n: Reg, label: str) -> None:
    """With a window: to the masked copy of the loop (``label``) while start_n lies in the left band."""
    if rows.left_end is not None:
        left = prog.reg("pred")
        prog.emit("setp.lt.u32", left, start_n, rows.left_end)
        prog.emit("bra", label, guard=left)


def emit_below_entry(prog: Program, rows: Rows, label: str) -> None:
    """With a window: ``label``, the body of the copy below the band (emit_below_again's target)."""
    if rows.left_end is not None:
        prog.label(label)


def emit_first_start(prog: Program, t: Tile, start_n: Reg) -> None:
    """start_n: the tile's first key (0 without a window)."""
    if t.window is None:
        prog.emit("mov.u32", start_n, 0)
        return
    prog.emit("shl.b32", start_n, t.window.first_block, t.block_n.bit_length() - 1)


def emit_relative(prog: Program, t: Tile, block: Reg) -> None:
    """block -= the tile's first block, in place (a key block number as the loops count it)."""
    if t.window is not None:
        prog.emit("sub.u32", block, block, t.window.first_block)
