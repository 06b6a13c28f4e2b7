"""The 16-bit consumer of the warp-specialized kernel (bf16.py's block step), which runs a
CTA's tiles back to back: a tile's last P V shares its GEMM phase with the next tile's S(0)."""
from __future__ import annotations

from ...spec.constants import NEG_FLOOR
from ..program import Program, Reg
from .bf16 import emit_pack16, emit_pv16, emit_row_update16, emit_softmax16
from .block import BLOCK_LOOPS, emit_rescale, emit_scale_rows
from .scores import emit_scores
from .consumer import (emit_block_loop_head, emit_consumer_start, emit_next_block, emit_release, emit_v_wait,
                       free_bar, v_bar)
from .cta import Cta, Rows, emit_rows
from .epilogue import emit_epilogue, emit_epilogue_targets, emit_epilogue_values
from .layout import HEAD_DIM, THREADS
from .loads import emit_kv_wait, stage
from .target import f32
from .tile_loop import TileLoop, emit_next_t, emit_q_wait, emit_tile_work
from .window import emit_below_again, emit_first_start, emit_left_band_jump, emit_relative


# Layout.early_pv_wait: the P V wait pinned after this exponential of the block (of 32 a thread
# at 128 keys): ptxas then places it after 3-10 of them (FlashAttention-3's: after 13)
EARLY_PV_WAIT_EXP = 15
TURN_BARRIER = 6                      # named barriers 6, 7 (Layout.turns; consumer.Q_BARRIER takes 3-5)
FIRST_LOOP = "BLOCK_LOOP" + BLOCK_LOOPS[0][0]   # a tile's blocks after its first: the copy below the band


def emit_consumer_16(prog: Program, c: Cta, tiles: TileLoop) -> None:
    """The 16-bit consumer (bf16.py's block step): per key block j one GEMM phase, S(j) and
    P(j - 1) V accumulating into the output, then the softmax of S(j) while it runs; once
    P(j - 1) V is done, the output is rescaled for block j. K(j) is released as soon as S(j)
    is done, V(j - 1) once P(j - 1) V is (Layout.split_kv), Q once the tile's last S is.
    Across a packed launch's tiles (LAST_PV, at Dqk and Dv 64 or 128): the next tile's Q and
    K(0) are waited for, its S(0) issued with the tile's last P V, its first softmax runs under
    that P V, then the tile's epilogue:
    the tile's last GEMM phase is the next tile's first, as in the block loop. (No branch
    while a wgmma is in flight and no read of total before its P V is waited for with
    nothing after it: else ptxas serializes every wgmma.)
    Layout.early_pv_wait moves the P V wait into the softmax and the rescale before P V.
    The d128 / MLA consumers (dense and packed) take turns to issue their GEMM phases
    (Layout.turns); an unconditional rescale after P V measured slower here."""
    emit = prog.emit
    _, _, q_descs = emit_consumer_start(prog, c)
    scratch = prog.reg("u32")                             # this thread's scratch word (Layout.pins_softmax)
    emit("mov.u32", scratch, "%tid.x")
    emit("mad.lo.u32", scratch, scratch, 4, c.shared.base)
    emit("add.u32", scratch, scratch, c.layout.scratch_offset - 4 * THREADS)
    handed = tiles.word is not None
    t, it, base = prog.regs("u32", 3)
    emit("mov.u32", t, "%ctaid.x")
    emit("mov.u32", it, 0)
    emit("mov.u32", base, 0)
    total, A, l = prog.regs("f32", c.layout.dv // 2), prog.regs("f32", 2), prog.regs("f32", 2)
    for ti in total:                                       # defined once (else ptxas serializes every wgmma)
        emit("mov.f32", ti, f32(0.0))
    j, start_n, slot, prev_slot = prog.regs("u32", 4)
    s = prog.regs("f32", c.layout.block_n // 2)
    p_regs = [prog.regs("b32", 4) for _ in range(c.layout.block_n // 16)]   # P(j - 1): A of the P V in flight
    onto, q_done = prog.regs("pred", 2)                    # a P V adds to total; the tile's last S is done
    below_end = prog.reg("u32")                            # the tile's first block in the masked band, or n_blocks

    def head(tag: str, done_label: str) -> Rows:
        """Tile t's Q (on to ``done_label`` past the last tile), registers and K(0); S(0) issued."""
        done = prog.reg("pred")
        if handed:
            emit_q_wait(prog, c, it, tag)
            emit("ld.shared.b32", t, tiles.word)
        emit("setp.ge.u32", done, t, tiles.count)
        emit("bra.div", done_label, guard=done)
        emit_tile_work(prog, c, tiles, t)
        rows = emit_rows(prog, c.params, c.thread, c.tile, c.layout.dv)
        emit("shr.u32", below_end, rows.band_start, c.layout.block_n.bit_length() - 1)   # band_start: a block's
        emit_relative(prog, c.tile, below_end)            # a window: counted from the tile's first block
        emit("min.u32", below_end, below_end, c.tile.n_blocks)
        if not handed:
            emit_q_wait(prog, c, it, tag)
        emit("mov.u32", slot, base)
        emit_kv_wait(prog, c, slot, f"_FIRST{tag}")       # K(0) (split_kv: the stage's "full" is K's)
        if turn:
            turn[0]()
        emit_scores(prog, c, q_descs, slot, s, f"_FIRST{tag}", wait=False)
        if turn:
            turn[1]()
        return rows

    def release_q_after_last_s(block: Reg) -> None:
        """Q free once S(block) is done, if it is the tile's last: the next Q loads under the last P V."""
        last = prog.reg("u32")
        emit("add.u32", last, block, 1)
        emit("setp.eq.u32", q_done, last, c.tile.n_blocks)
        emit("and.pred", q_done, q_done, c.thread.lane0)
        emit("mbarrier.arrive", tiles.q_free, guard=q_done)

    def first_softmax(rows: Rows, tag: str):
        """Block 0 of a tile, its S done: the row state reset, its softmax (P packed later)."""
        for half in (0, 1):
            emit("mov.f32", A[half], f32(NEG_FLOOR))
            emit("mov.f32", l[half], f32(0.0))
        emit("mov.u32", j, 0)
        emit_first_start(prog, c.tile, start_n)
        emit_release(prog, c, free_bar(prog, c, slot))  # K(0) read
        release_q_after_last_s(j)
        sm = emit_softmax16(prog, c, rows, start_n, s, A, tag)
        emit_row_update16(prog, sm, l, A)
        return sm

    turn = _turns(prog, c) if c.layout.turns else None
    early = c.layout.early_pv_wait
    alpha_prev = prog.regs("f32", 2) if early else None   # the last block's alpha, for the next P V
    if early:
        for half in (0, 1):
            emit("mov.f32", alpha_prev[half], f32(1.0))

    def rescale_before_pv() -> None:
        """total *= the last block's alpha, before P(j - 1) V is issued (while S(j) runs); at a
        tile's first P V, which overwrites total, the product is unused."""
        emit_scale_rows(prog, total, alpha_prev)

    def pin(sm) -> None:
        """A value of the block's softmax stored before the P V wait, which keeps ptxas from
        hoisting that wait above it (Layout.pins_softmax): the row sums, or with early_pv_wait
        one early exponential."""
        if early:
            emit("st.shared.f32", scratch, sm.p[EARLY_PV_WAIT_EXP])
            return
        both = prog.reg("f32")
        emit("add.f32", both, sm.l_blk[0], sm.l_blk[1])
        emit("st.shared.f32", scratch, both)

    def issue_pv(block_slot) -> None:
        """P(j - 1) V; a tile's first overwrites total (which holds the last tile's output)."""
        _, v_tile, _, _ = stage(prog, c, block_slot)
        emit("setp.gt.u32", onto, j, 1)
        emit_pv16(prog, c, p_regs, v_tile, total, accumulate=onto)

    rows = head("", "CONSUMER_DONE")
    emit("wgmma.wait", 0)
    sm = first_softmax(rows, "_FIRST")
    emit_pack16(prog, c, sm.p, p_regs)

    def advance(end: Reg, body: str, below: str | None = None) -> None:
        """The loop's bottom: on to block j + 1, back to ``body`` while j < ``end`` (the test
        sits under the block's last FADDs instead of before S: -25 static cycles a block);
        ``below``: a window's left band ends there (window.emit_below_again)."""
        go = prog.reg("pred")
        emit_next_block(prog, c, j, start_n, slot, prev_slot)
        if below:
            emit_below_again(prog, rows, start_n, below)
        emit("setp.lt.u32", go, j, end)
        emit("bra", body, guard=go)

    prog.comment("block j: GEMM phase S(j) + P(j - 1) V; softmax of S(j); rescale the output. Two copies")
    prog.comment("of the loop: the blocks below the masked band (no mask test), the band's")
    for tag, masked in BLOCK_LOOPS:
        if masked:
            prog.label("BELOW_DONE")                       # j: the band's first block, or past the last
            last = prog.reg("pred")
            emit("setp.ge.u32", last, j, c.tile.n_blocks)
            emit("bra", "LAST_PV", guard=last)
        else:                                              # a tile's blocks after its first enter here
            emit_block_loop_head(prog, c, j, start_n, slot, prev_slot, f"BLOCK_LOOP{tag}", below_end, "BELOW_DONE")
            emit_left_band_jump(prog, rows, start_n, "BLOCK_BODY")   # a window's left band: the masked copy
        prog.label(f"BLOCK_BODY{tag}")
        emit_kv_wait(prog, c, slot, tag)
        if turn:
            turn[0]()
        emit_scores(prog, c, q_descs, slot, s, tag, wait=False)
        if early:
            rescale_before_pv()
        emit_v_wait(prog, c, prev_slot, tag)
        issue_pv(prev_slot)
        if turn:
            turn[1]()
        emit("wgmma.wait", 1)                              # S(j); P(j - 1) V may still run
        emit_release(prog, c, free_bar(prog, c, slot))  # K(j) read: the producer may reload it
        release_q_after_last_s(j)
        sm = emit_softmax16(prog, c, rows, start_n, s, A, tag, masked=masked)
        pin(sm)
        emit("wgmma.wait", 0)                              # P(j - 1) V
        emit_release(prog, c, v_bar(prog, c, prev_slot, c.shared.v_free0))
        emit_pack16(prog, c, sm.p, p_regs)                # P(j - 1)'s registers are free
        if early:
            for half in (0, 1):
                emit("mov.f32", alpha_prev[half], sm.alpha[half])
        else:
            emit_rescale(prog, total, sm.alpha, tag)
        emit_row_update16(prog, sm, l, A)
        advance(c.tile.n_blocks if masked else below_end, f"BLOCK_BODY{tag}",   # then BELOW_DONE, LAST_PV
                f"BLOCK_BODY{BLOCK_LOOPS[0][0]}" if masked else None)

    prog.label("LAST_PV")
    if early:
        rescale_before_pv()
    if c.layout.dv > HEAD_DIM or c.layout.dqk > HEAD_DIM or not c.layout.packed:
        _emit_tile_after_tile(prog, c, tiles, t, it, base, rows, head, first_softmax, issue_pv, prev_slot,
                              total, A, l, p_regs)
        return
    prog.comment("the tile's last P V with the next tile's S(0); its softmax, then this tile's epilogue")
    to = emit_epilogue_targets(prog, c, rows)             # before the next tile's registers replace these
    A_last, l_last = prog.regs("f32", 2), prog.regs("f32", 2)
    for half in (0, 1):
        emit("mov.f32", A_last[half], A[half])
        emit("mov.f32", l_last[half], l[half])
    n_last = prog.reg("u32")                              # the tile's block count: its last P V's j
    emit("mov.u32", n_last, j)
    emit("add.u32", base, base, c.tile.n_blocks)
    emit("add.u32", it, it, 1)
    if not handed:
        emit_next_t(prog, tiles, t)
    emit_v_wait(prog, c, prev_slot, "_LAST")
    next_rows = head("_NEXT", "TILE_DONE")
    emit("mov.u32", j, n_last)
    issue_pv(prev_slot)
    emit("wgmma.wait", 1)                                  # S(0); the last P V may still run
    for dst, src in zip(_row_registers(rows), _row_registers(next_rows)):
        emit(MOVES[dst.kind], dst, src)
    sm = first_softmax(rows, "_NEXT")
    pin(sm)
    emit("wgmma.wait", 0)                                  # the last P V
    emit_release(prog, c, v_bar(prog, c, prev_slot, c.shared.v_free0))
    emit_epilogue_values(prog, c, to, None, total, A_last, l_last)
    emit_pack16(prog, c, sm.p, p_regs)
    emit("bra", FIRST_LOOP)

    prog.label("TILE_DONE")
    emit("mov.u32", j, n_last)
    issue_pv(prev_slot)
    emit("wgmma.wait", 0)
    emit_release(prog, c, v_bar(prog, c, prev_slot, c.shared.v_free0))
    emit_epilogue_values(prog, c, to, None, total, A_last, l_last)
    prog.label("CONSUMER_DONE")


def _emit_tile_after_tile(prog: Program, c: Cta, tiles: TileLoop, t: Reg, it: Reg, base: Reg, rows: Rows, head,
                          first_softmax, issue_pv, prev_slot: Reg, total: list[Reg], A: list[Reg], l: list[Reg],
                          p_regs: list[list[Reg]]) -> None:
    """LAST_PV at Dv 256, whose 128 output registers leave no room for the next tile's S(0)
    and softmax beside the last P V (spills), at Dqk 192 (the overlap measured 5% slower
    at 1K on the H200), and in dense launches, whose CTA runs one tile (the overlap's code,
    never run there, spilled d64's 128 registers beside the staged epilogue): the last P V,
    the epilogue, then the next tile's head and block 0 alone."""
    emit = prog.emit
    emit_v_wait(prog, c, prev_slot, "_LAST")
    issue_pv(prev_slot)
    emit("wgmma.wait", 0)
    emit_release(prog, c, v_bar(prog, c, prev_slot, c.shared.v_free0))
    emit_epilogue(prog, c, rows, total, A, l)
    emit("add.u32", base, base, c.tile.n_blocks)
    emit("add.u32", it, it, 1)
    if tiles.word is None:
        emit_next_t(prog, tiles, t)
    next_rows = head("_NEXT", "CONSUMER_DONE")
    for dst, src in zip(_row_registers(rows), _row_registers(next_rows)):
        emit(MOVES[dst.kind], dst, src)
    emit("wgmma.wait", 0)
    sm = first_softmax(rows, "_NEXT")
    emit_pack16(prog, c, sm.p, p_regs)
    emit("bra", FIRST_LOOP)
    prog.label("CONSUMER_DONE")


def _turns(prog: Program, c: Cta):
    """Layout.turns: named barriers TURN_BARRIER (the first consumer's turn) and + 1 (the
    second's); the second consumer hands the first its first turn. Returns (wait for my turn,
    hand the turn over), emitted around each GEMM phase."""
    emit = prog.emit
    mine, other = prog.regs("u32", 2)
    emit("add.u32", mine, c.thread.wg, TURN_BARRIER - 1)
    emit("xor.b32", other, mine, 1)
    second = prog.reg("pred")
    emit("setp.eq.u32", second, c.thread.wg, 2)
    emit("bar.arrive.n", TURN_BARRIER, 2 * THREADS, guard=second)
    return (lambda: emit("bar.sync.n", mine, 2 * THREADS)), (lambda: emit("bar.arrive.n", other, 2 * THREADS))


MOVES = {"u32": "mov.u32", "f32": "mov.f32", "u64": "mov.b64"}   # a register copied, by kind


def _row_registers(rows: Rows) -> list[Reg]:
    """The registers of a 16-bit consumer's Rows (a next tile's are moved into the loop's)."""
    window = [rows.first, rows.left_end] if rows.left_end is not None else []
    return [*rows.rows, *rows.limits, rows.band_start, rows.fac, rows.vd_base, *window]
