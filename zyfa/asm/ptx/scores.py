"""S = Q K^T in the generated Hopper kernel and what is read off it before the softmax: the Q
tile's wgmma descriptors, the score wgmmas of a key block, the masks (the causal band; window.py
the sliding window's), the quad reduction and the row maxima; and the sign fix that keeps the
scores' factor positive."""
from __future__ import annotations

from ...spec.constants import MAGIC, NEG_FLOOR
from ..program import Program, Reg
from .cta import Cta, Rows
from .fragments import acc_key, acc_row_half, key_lanes
from .int8_qk import MASKED_SCORE, emit_int_row_max
from .layout import BLOCK_M, THREADS
from .loads import stage
from .smem import emit_descriptor, emit_wait
from .target import f32
from .window import emit_window_band_mask



# Q steps whose descriptors are held across the block loop; more (16-bit Dqk 192 / 256: 12, 16)
# did not fit the uniform registers beside K's and V's, and the loop moved them back from vector
# registers before its HGMMAs, slower on the H200 (docs/decisions.md)
Q_DESCRIPTORS_HELD = 8


def emit_q_descriptors(prog: Program, c: Cta, q_tile: Reg, dq: Reg) -> list[list[Reg]]:
    """Q's wgmma descriptor for every K step of S = Q K^T, by column tile, from the Q tile at
    ``q_tile`` (descriptor ``dq``). Up to Q_DESCRIPTORS_HELD steps: built once before the block
    loop, which then only reads them (rebuilt a block, each step cost a 64-bit add and moves
    into uniform registers). More: only each column tile's first, emit_scores adds the rest."""
    out = []
    held = sum(width // 32 for _, width in c.layout.qk_tiles) <= Q_DESCRIPTORS_HELD
    for col, width in c.layout.qk_tiles:                     # column tile col: BLOCK_M x col on
        d = dq
        if col:
            q_col = prog.reg("u32")
            prog.emit("add.u32", q_col, q_tile, BLOCK_M * col)
            d = emit_descriptor(prog, q_col, width)
        steps = [d]
        for step in range(1, width // 32 if held else 1):     # 32 bytes of K: 2 descriptor units
            a = prog.reg("u64")
            prog.emit("add.u64", a, d, 2 * step)
            steps.append(a)
        out.append(steps)
    return out


def emit_scores(prog: Program, c: Cta, q_descs: list[list[Reg]], j: Reg, s: list[Reg], tag: str,
                wait: bool = True) -> None:
    """Wait for key block ``j``'s stage (unless the caller did), then issue S = Q K^T into
    ``s`` with Q's descriptors ``q_descs`` (emit_q_descriptors); committed, not waited."""
    emit = prog.emit
    layout = c.layout
    k_tile, _, bar, phase = stage(prog, c, j)
    if wait:
        emit_wait(prog, bar, phase, f"WAIT_KV{tag}")
    tiles = []
    for (col, width), q_steps in zip(layout.qk_tiles, q_descs):
        k_col = k_tile
        if col:
            k_col = prog.reg("u32")
            emit("add.u32", k_col, k_tile, layout.block_n * col)
        tiles.append((q_steps, width // 32, emit_descriptor(prog, k_col, width)))
    prog.comment("S = Q K^T")
    s_list = ", ".join(map(str, s))
    shape = f"m64n{layout.block_n}"               # a row's scores for the block's keys
    op = (f"wgmma.{shape}k32.s8.ss" if layout.int8_qk else f"wgmma.{shape}k32.e4m3.ss" if layout.is_fp8
          else f"wgmma.{shape}k16.{layout.dtype}.ss")
    emit("wgmma.fence")
    first = True
    for q_steps, n_steps, dk_t in tiles:
        for step in range(n_steps):
            if step < len(q_steps):
                ak = q_steps[step]
            else:                                         # not held: built here from the tile's first
                ak = prog.reg("u64")
                emit("add.u64", ak, q_steps[0], 2 * step)
            bk = prog.reg("u64")
            emit("add.u64", bk, dk_t, 2 * step)
            emit(op, s_list, ak, bk, 0 if first else c.accumulate)
            first = False
    emit("wgmma.commit")


def masked_move(ints: bool) -> tuple[str, str]:
    """The move that masks a score (instruction, value): -inf, or MASKED_SCORE in int32 scores
    (int8_qk's, before their conversion)."""
    return ("mov.b32", MASKED_SCORE) if ints else ("mov.f32", f32(float("-inf")))


def emit_mask(prog: Program, c: Cta, rows: Rows, t: list[Reg], start_n: Reg, ints: bool = False) -> None:
    """t = -inf (``ints``: MASKED_SCORE) where key > the row's limit (causal diagonal, or past
    seqlen_k)."""
    q, slot = c.thread.q, c.layout.slot_keys
    move, value = masked_move(ints)
    reach = prog.regs("u32", 2)
    for half in (0, 1):
        prog.emit("sub.s32", reach[half], rows.limits[half], start_n)
        for _ in range(key_lanes(slot)):
            prog.emit("sub.s32", reach[half], reach[half], q)     # limit - start_n - 2q (slot order: 4q)
    for i, ti in enumerate(t):
        past = prog.reg("pred")
        prog.emit("setp.lt.s32", past, reach[acc_row_half(i)], acc_key(i, slot))
        prog.emit(move, ti, value, guard=past)


def emit_quad_reduce(prog: Program, x: Reg, op: str) -> None:
    """x <- op over the four threads of a quad (they hold one row's columns)."""
    other = prog.reg("f32")
    for lane_mask in (1, 2):
        prog.emit("shfl.bfly", other, x, lane_mask)
        prog.emit(op, x, x, other)


def emit_band_mask(prog: Program, c: Cta, rows: Rows, s: list[Reg], start_n: Reg, tag: str,
                   ints: bool = False) -> None:
    """Mask the scores ``s`` (``ints``: int32) of the block at ``start_n`` if it lies in the
    masked band."""
    if rows.left_end is not None:                          # a window's left band too
        return emit_window_band_mask(prog, c, rows, s, start_n, tag, masked_move(ints))
    unmasked = prog.reg("pred")
    prog.emit("setp.lt.u32", unmasked, start_n, rows.band_start)
    prog.emit("bra", f"SCORES_READY{tag}", guard=unmasked)
    emit_mask(prog, c, rows, s, start_n, ints)
    prog.label(f"SCORES_READY{tag}")


def emit_row_max(prog: Program, s: list[Reg], fac: Reg | None, half: int, m: Reg, masked: bool = True,
                 floor: bool = True, ints: bool = False, biased: bool = False) -> Reg | None:
    """m = max(S) c over the thread's row ``half`` and its quad (c > 0: rounding is monotone,
    so max(S c) = max(S) c), -inf for a fully masked row, at least NEG_FLOOR (``floor`` False:
    not floored, for a caller that takes max(A, m) with A >= NEG_FLOOR next). Unmasked
    blocks (``masked`` False) have no -inf score (E4M3 has no infinity), so no guard there.
    ``fac`` None: m = max(S), unscaled (int8_qk: int8_qk.emit_grid_max scales it).
    ``ints``: S is int32 still (int8_qk), its max taken on the integers; ``biased``: the
    registers hold R = M + S (int8_qk), M taken off the max (exact; -inf stays). Returns the
    predicate of a fully masked row (None where ``masked`` is False)."""
    emit = prog.emit
    all_masked = None
    regs = [si for i, si in enumerate(s) if acc_row_half(i) == half]
    if ints:
        emit_int_row_max(prog, regs, m)
    else:
        emit("max.nan.f32", m, regs[0], regs[1])
        for si in regs[2:]:
            emit("max.nan.f32", m, m, si)
        emit_quad_reduce(prog, m, "max.nan.f32")
        if biased:
            emit("sub.f32", m, m, f32(MAGIC))
    if masked:
        all_masked = prog.reg("pred")
        emit("setp.eq.f32", all_masked, m, f32(float("-inf")))
    if fac is None:
        return all_masked
    emit("mul.f32", m, m, fac)
    if masked:
        emit("mov.f32", m, f32(float("-inf")), guard=all_masked)   # -inf * 0 would be NaN
    if floor:
        emit("max.nan.f32", m, m, f32(NEG_FLOOR))
    return all_masked


def emit_positive_factor(prog: Program, c: Cta, rows: Rows, q_tile: Reg | None = None, sync=None) -> None:
    """Make c > 0, which the row max on S needs: for a negative c (a negative descale), flip
    the sign bits of the Q tile (``q_tile``, default the first) in shared memory (S -> -S) and
    negate c. t = S c is unchanged. ``sync()`` emits the barrier of the threads that share
    the tile (default: the CTA's)."""
    emit = prog.emit
    q_bytes = c.layout.q_bytes
    negative = prog.reg("pred")
    emit("setp.lt.f32", negative, rows.fac, f32(0.0))
    emit("bra", "FACTOR_POSITIVE", guard=f"!{negative}")       # uniform: c is per (batch, kv head)
    emit("mul.f32", rows.fac, rows.fac, f32(-1.0))
    tid, base, addr, word = prog.regs("u32", 4)
    emit("mov.u32", tid, "%tid.x")
    if q_tile is not None:
        emit("and.b32", tid, tid, THREADS - 1)
    emit("mad.lo.u32", base, tid, q_bytes // THREADS, c.shared.base if q_tile is None else q_tile)
    for i in range(q_bytes // THREADS // 4):
        emit("add.u32", addr, base, 4 * i)
        emit("ld.shared.b32", word, addr)
        emit("xor.b32", word, word, 0x80808080)
        emit("st.shared.b32", addr, word)
    emit("fence.proxy.async")                  # generic-proxy writes, read next by wgmma
    sync() if sync else emit("bar.sync", 0)
    prog.label("FACTOR_POSITIVE")
