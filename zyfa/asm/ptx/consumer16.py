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
from .tile_loop import TileLoop, emit_handed_tile, emit_next_t, emit_q_wait, emit_tile_work
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
    k = _Consumer16(prog, c, tiles)
    rows = k.head("", "CONSUMER_DONE")
    prog.emit("wgmma.wait", 0)
    sm = k.first_softmax(rows, "_FIRST")
    emit_pack16(prog, c, sm.p, k.p_regs)
    k.block_loops(rows)
    prog.label("LAST_PV")
    if k.early:
        k.rescale_before_pv()
    if c.layout.dv > HEAD_DIM or c.layout.dqk > HEAD_DIM or not c.layout.packed:
        _emit_tile_after_tile(prog, c, tiles, k.t, k.it, k.base, rows, k.head, k.first_softmax, k.issue_pv,
                              k.prev_slot, k.total, k.A, k.l, k.p_regs)
        return
    k.last_pv_beside_next_tile(rows)


class _Consumer16:
    """The 16-bit consumer's registers (allocated, and the first values set, in the order the
    kernel text has always had them) and the pieces its block loops and tile change-over emit."""

    def __init__(self, prog: Program, c: Cta, tiles: TileLoop):
        self.prog, self.c, self.tiles = prog, c, tiles
        emit = prog.emit
        _, _, self.q_descs = emit_consumer_start(prog, c)
        self.scratch = prog.reg("u32")                    # this thread's scratch word (Layout.pins_softmax)
        emit("mov.u32", self.scratch, "%tid.x")
        emit("mad.lo.u32", self.scratch, self.scratch, 4, c.shared.base)
        emit("add.u32", self.scratch, self.scratch, c.layout.scratch_offset - 4 * THREADS)
        self.handed = tiles.word is not None
        self.t, self.it, self.base = prog.regs("u32", 3)
        emit("mov.u32", self.t, "%ctaid.x")
        emit("mov.u32", self.it, 0)
        emit("mov.u32", self.base, 0)
        self.total, self.A, self.l = prog.regs("f32", c.layout.dv // 2), prog.regs("f32", 2), prog.regs("f32", 2)
        for ti in self.total:                             # defined once (else ptxas serializes every wgmma)
            emit("mov.f32", ti, f32(0.0))
        self.j, self.start_n, self.slot, self.prev_slot = prog.regs("u32", 4)
        self.s = prog.regs("f32", c.layout.block_n // 2)
        self.p_regs = [prog.regs("b32", 4) for _ in range(c.layout.block_n // 16)]   # P(j - 1): A of the P V in flight
        self.onto, self.q_done = prog.regs("pred", 2)     # a P V adds to total; the tile's last S is done
        self.below_end = prog.reg("u32")                  # the tile's first block in the masked band, or n_blocks
        self.turn = _turns(prog, c) if c.layout.turns else None
        self.early = c.layout.early_pv_wait
        self.alpha_prev = prog.regs("f32", 2) if self.early else None   # the last block's alpha, for the next P V
        if self.early:
            for half in (0, 1):
                emit("mov.f32", self.alpha_prev[half], f32(1.0))

    def head(self, tag: str, done_label: str) -> Rows:
        """Tile t's Q (on to ``done_label`` past the last tile), registers and K(0); S(0) issued."""
        prog, c, emit = self.prog, self.c, self.prog.emit
        done = prog.reg("pred")
        if self.handed:
            emit_q_wait(prog, c, self.it, tag)
            emit_handed_tile(prog, c, self.tiles, self.t)
        emit("setp.ge.u32", done, self.t, self.tiles.count)
        emit("bra.div", done_label, guard=done)
        emit_tile_work(prog, c, self.tiles, self.t)
        rows = emit_rows(prog, c.params, c.thread, c.tile, c.layout.dv)
        emit("shr.u32", self.below_end, rows.band_start, c.layout.block_n.bit_length() - 1)   # band_start: a block's
        emit_relative(prog, c.tile, self.below_end)       # a window: counted from the tile's first block
        emit("min.u32", self.below_end, self.below_end, c.tile.n_blocks)
        if not self.handed:
            emit_q_wait(prog, c, self.it, tag)
        emit("mov.u32", self.slot, self.base)
        emit_kv_wait(prog, c, self.slot, f"_FIRST{tag}")  # K(0) (split_kv: the stage's "full" is K's)
        if self.turn:
            self.turn[0]()
        emit_scores(prog, c, self.q_descs, self.slot, self.s, f"_FIRST{tag}", wait=False)
        if self.turn:
            self.turn[1]()
        return rows

    def release_q_after_last_s(self, block: Reg) -> None:
        """Q free once S(block) is done, if it is the tile's last: the next Q loads under the last P V."""
        emit = self.prog.emit
        last = self.prog.reg("u32")
        emit("add.u32", last, block, 1)
        emit("setp.eq.u32", self.q_done, last, self.c.tile.n_blocks)
        emit("and.pred", self.q_done, self.q_done, self.c.thread.lane0)
        emit("mbarrier.arrive", self.tiles.q_free, guard=self.q_done)

    def first_softmax(self, rows: Rows, tag: str):
        """Block 0 of a tile, its S done: the row state reset, its softmax (P packed later)."""
        prog, c, emit = self.prog, self.c, self.prog.emit
        for half in (0, 1):
            emit("mov.f32", self.A[half], f32(NEG_FLOOR))
            emit("mov.f32", self.l[half], f32(0.0))
        emit("mov.u32", self.j, 0)
        emit_first_start(prog, c.tile, self.start_n)
        emit_release(prog, c, free_bar(prog, c, self.slot))   # K(0) read
        self.release_q_after_last_s(self.j)
        sm = emit_softmax16(prog, c, rows, self.start_n, self.s, self.A, tag)
        emit_row_update16(prog, sm, self.l, self.A)
        return sm

    def rescale_before_pv(self) -> None:
        """total *= the last block's alpha, before P(j - 1) V is issued (while S(j) runs); at a
        tile's first P V, which overwrites total, the product is unused."""
        emit_scale_rows(self.prog, self.total, self.alpha_prev)

    def pin(self, sm) -> None:
        """A value of the block's softmax stored before the P V wait, which keeps ptxas from
        hoisting that wait above it (Layout.pins_softmax): the row sums, or with early_pv_wait
        one early exponential."""
        emit = self.prog.emit
        if self.early:
            emit("st.shared.f32", self.scratch, sm.p[EARLY_PV_WAIT_EXP])
            return
        both = self.prog.reg("f32")
        emit("add.f32", both, sm.l_blk[0], sm.l_blk[1])
        emit("st.shared.f32", self.scratch, both)

    def issue_pv(self, block_slot) -> None:
        """P(j - 1) V; a tile's first overwrites total (which holds the last tile's output)."""
        _, v_tile, _, _ = stage(self.prog, self.c, block_slot)
        self.prog.emit("setp.gt.u32", self.onto, self.j, 1)
        emit_pv16(self.prog, self.c, self.p_regs, v_tile, self.total, accumulate=self.onto)

    def advance(self, rows: Rows, end: Reg, body: str, below: str | None = None) -> None:
        """The loop's bottom: on to block j + 1, back to ``body`` while j < ``end`` (the test
        sits under the block's last FADDs instead of before S: -25 static cycles a block);
        ``below``: a window's left band ends there (window.emit_below_again)."""
        go = self.prog.reg("pred")
        emit_next_block(self.prog, self.c, self.j, self.start_n, self.slot, self.prev_slot)
        if below:
            emit_below_again(self.prog, rows, self.start_n, below)
        self.prog.emit("setp.lt.u32", go, self.j, end)
        self.prog.emit("bra", body, guard=go)

    def block_loops(self, rows: Rows) -> None:
        """Block j: GEMM phase S(j) + P(j - 1) V; the softmax of S(j); the output rescaled."""
        prog, c, emit = self.prog, self.c, self.prog.emit
        j, slot, prev_slot = self.j, self.slot, self.prev_slot
        prog.comment("block j: GEMM phase S(j) + P(j - 1) V; softmax of S(j); rescale the output. Two copies")
        prog.comment("of the loop: the blocks below the masked band (no mask test), the band's")
        for tag, masked in BLOCK_LOOPS:
            if masked:
                prog.label("BELOW_DONE")                   # j: the band's first block, or past the last
                last = prog.reg("pred")
                emit("setp.ge.u32", last, j, c.tile.n_blocks)
                emit("bra", "LAST_PV", guard=last)
            else:                                          # a tile's blocks after its first enter here
                emit_block_loop_head(prog, c, j, self.start_n, slot, prev_slot, f"BLOCK_LOOP{tag}", self.below_end,
                                     "BELOW_DONE")
                emit_left_band_jump(prog, rows, self.start_n, "BLOCK_BODY")   # a window's left band: the masked copy
            prog.label(f"BLOCK_BODY{tag}")
            emit_kv_wait(prog, c, slot, tag)
            if self.turn:
                self.turn[0]()
            emit_scores(prog, c, self.q_descs, slot, self.s, tag, wait=False)
            if self.early:
                self.rescale_before_pv()
            emit_v_wait(prog, c, prev_slot, tag)
            self.issue_pv(prev_slot)
            if self.turn:
                self.turn[1]()
            emit("wgmma.wait", 1)                          # S(j); P(j - 1) V may still run
            emit_release(prog, c, free_bar(prog, c, slot))   # K(j) read: the producer may reload it
            self.release_q_after_last_s(j)
            sm = emit_softmax16(prog, c, rows, self.start_n, self.s, self.A, tag, masked=masked)
            self.pin(sm)
            emit("wgmma.wait", 0)                          # P(j - 1) V
            emit_release(prog, c, v_bar(prog, c, prev_slot, c.shared.v_free0))
            emit_pack16(prog, c, sm.p, self.p_regs)        # P(j - 1)'s registers are free
            if self.early:
                for half in (0, 1):
                    emit("mov.f32", self.alpha_prev[half], sm.alpha[half])
            else:
                emit_rescale(prog, self.total, sm.alpha, tag)
            emit_row_update16(prog, sm, self.l, self.A)
            self.advance(rows, c.tile.n_blocks if masked else self.below_end, f"BLOCK_BODY{tag}",   # then
                         f"BLOCK_BODY{BLOCK_LOOPS[0][0]}" if masked else None)          # BELOW_DONE, LAST_PV

    def last_pv_beside_next_tile(self, rows: Rows) -> None:
        """LAST_PV in a packed launch at Dqk and Dv 64 or 128: the tile's last P V with the next
        tile's S(0); its softmax, then this tile's epilogue."""
        prog, c, emit = self.prog, self.c, self.prog.emit
        prog.comment("the tile's last P V with the next tile's S(0); its softmax, then this tile's epilogue")
        to = emit_epilogue_targets(prog, c, rows)         # before the next tile's registers replace these
        A_last, l_last = prog.regs("f32", 2), prog.regs("f32", 2)
        for half in (0, 1):
            emit("mov.f32", A_last[half], self.A[half])
            emit("mov.f32", l_last[half], self.l[half])
        n_last = prog.reg("u32")                          # the tile's block count: its last P V's j
        emit("mov.u32", n_last, self.j)
        emit("add.u32", self.base, self.base, c.tile.n_blocks)
        emit("add.u32", self.it, self.it, 1)
        if not self.handed:
            emit_next_t(prog, self.tiles, self.t)
        emit_v_wait(prog, c, self.prev_slot, "_LAST")
        next_rows = self.head("_NEXT", "TILE_DONE")
        emit("mov.u32", self.j, n_last)
        self.issue_pv(self.prev_slot)
        emit("wgmma.wait", 1)                              # S(0); the last P V may still run
        for dst, src in zip(_row_registers(rows), _row_registers(next_rows)):
            emit(MOVES[dst.kind], dst, src)
        sm = self.first_softmax(rows, "_NEXT")
        self.pin(sm)
        emit("wgmma.wait", 0)                              # the last P V
        emit_release(prog, c, v_bar(prog, c, self.prev_slot, c.shared.v_free0))
        emit_epilogue_values(prog, c, to, None, self.total, A_last, l_last)
        emit_pack16(prog, c, sm.p, self.p_regs)
        emit("bra", FIRST_LOOP)

        prog.label("TILE_DONE")
        emit("mov.u32", self.j, n_last)
        self.issue_pv(self.prev_slot)
        emit("wgmma.wait", 0)
        emit_release(prog, c, v_bar(prog, c, self.prev_slot, c.shared.v_free0))
        emit_epilogue_values(prog, c, to, None, self.total, A_last, l_last)
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
