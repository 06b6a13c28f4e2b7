"""The warp-specialized kernel's FP8 consumers (E4M3 and INT8 Q.K^T): the pipelined one, whose
GEMM phase for key block j issues S(j) = Q K_j^T and P(j - 1) V_{j-1}^T together and runs the
softmax of S(j) under them, and at Dv 256 with block references the blockwise one, a block at
a time (its accumulators would not fit beside S in flight). specialized.py emits the producer
and picks one of these; consumer.py holds what all consumers share."""
from __future__ import annotations

from ..program import Program, Reg
from .block import (
    BLOCK_LOOPS,
    emit_accumulators,
    emit_block,
    emit_fold,
    emit_pv_issue,
    emit_reference_moves,
    emit_rescale,
    emit_row_update,
    v_halves,
)
from .consumer import emit_block_loop_head, emit_consumer_start, emit_release, free_bar
from .cta import Cta, Rows
from .epilogue import emit_epilogue
from .int8_qk import emit_block_factors, emit_positive_rows
from .layout import OUT_REGS, THREADS
from .lean_p import thread_row_sums
from .loads import emit_kv_wait, stage
from .scores import emit_positive_factor, emit_scores
from .smem import emit_descriptor
from .softmax import emit_row_sum_parts, emit_softmax
from .target import f32
from .tile_loop import TileLoop, emit_tile_end, emit_tile_entry
from .window import emit_band_test, emit_below_again, emit_below_entry, emit_first_start

def _emit_fp8_tile_start(prog: Program, c: Cta, tiles: TileLoop, ones: Reg) -> tuple:
    """An FP8 consumer up to its tile's work: registers taken, the ones tile's descriptor, the
    tile loop's head (label TILE), the tile's rows, Q landed and its factor made positive.
    Returns (q_descs, d_ones, rows, t, it, base); base: the load number of the tile's block 0."""
    q_sync, q_tile, q_descs = emit_consumer_start(prog, c)
    d_ones = emit_descriptor(prog, ones) if ones is not None else None
    rows, t, it, base = emit_tile_entry(prog, c, tiles)
    if not c.layout.int8_qk:                # int8_qk: the rows' factors a block (_emit_positive_rows)
        emit_positive_factor(prog, c, rows, q_tile, sync=lambda: prog.emit("bar.sync.n", q_sync, THREADS))
    return q_descs, d_ones, rows, t, it, base


def _emit_block_factors(prog: Program, c: Cta, rows: Rows, j: Reg) -> list[Reg] | None:
    """int8_qk: key block j's two row factors, loaded while its S runs (else None)."""
    return emit_block_factors(prog, rows, j) if c.layout.int8_qk else None


def _emit_positive_rows(prog: Program, c: Cta, s: list[Reg], facs: list[Reg] | None, tag: str) -> None:
    """int8_qk, once S is done: rows with negative factors flipped (the scores stay int32)."""
    if c.layout.int8_qk:
        emit_positive_rows(prog, s, facs, tag)


def _emit_scores_alone(prog: Program, c: Cta, q_descs, rows: Rows, j: Reg, slot: Reg, s: list[Reg],
                       tag: str) -> list[Reg] | None:
    """S(j) = Q K_j^T in a GEMM phase of its own, waited for (int8_qk: int32 still); returns the
    block's int8 row factors (else None)."""
    emit_kv_wait(prog, c, slot, tag)
    emit_scores(prog, c, q_descs, slot, s, tag, wait=False)
    facs = _emit_block_factors(prog, c, rows, j)
    prog.emit("wgmma.wait", 0)
    _emit_positive_rows(prog, c, s, facs, tag)
    return facs


class _Carried:
    """What the pipelined consumer carries from block j - 1 into block j's GEMM phase: P(j - 1),
    the A operand of its P V^T; with block references also its alpha and beta, and folding
    under S (``lag``) block j - 2's P V^T (``o_fixed``) and factors (alpha_2, beta_2). Running
    with the exact rule: the total's factor due before P(j - 1) V^T (``alpha_due``)."""

    def __init__(self, prog: Program, c: Cta, total: list[Reg], running: bool):
        self.prog, self.c, self.total, self.running = prog, c, total, running
        emit = prog.emit
        self.p_regs = [prog.regs("b32", 4) for _ in range(c.layout.p_steps)]
        self.alpha, self.beta = (None, None) if running else (prog.regs("f32", 2), prog.regs("f32", 2))
        # block references folding under S (Layout.fold_under_s): block j - 2's P V^T, waited for in
        # block j - 1, is folded while S(j) runs, before P(j - 1) V^T is issued into the same
        # registers; its factors kept a block longer (alpha_2, beta_2). Before block 0's: o = 0,
        # alpha_2 = 1, beta_2 = 0 (no change)
        self.lag = lag = not running and c.layout.fold_under_s
        self.o_fixed = prog.regs("f32", OUT_REGS) if lag else None
        self.alpha_2, self.beta_2 = (prog.regs("f32", 2), prog.regs("f32", 2)) if lag else (None, None)
        for half in (0, 1) if lag else ():
            emit("mov.f32", self.alpha_2[half], f32(1.0))
            emit("mov.f32", self.beta_2[half], f32(0.0))
        for oi in self.o_fixed or ():
            emit("mov.f32", oi, f32(0.0))
        self.alpha_due = None

    def keep(self, sm) -> None:
        """P of this block for its P V^T, issued in the next GEMM phase; block references: its
        alpha (unless the reference update left it in place) and beta too."""
        emit = self.prog.emit
        for k in range(len(self.p_regs)):
            for r in range(4):
                emit("mov.b32", self.p_regs[k][r], sm.p_regs[k][r])
        for half in (() if self.running else (0, 1)):
            if sm.alpha is not None:
                emit("mov.f32", self.alpha[half], sm.alpha[half])
            emit("mov.f32", self.beta[half], sm.beta[half])

    def start_rescale_under_s(self, rule: str) -> None:
        """Running with the exact rule: the total takes alpha(j - 1) while S(j) runs, before
        P(j - 1) V^T is issued (FlashAttention-3's order), not in the tail after the P V^T wait;
        the lean rules' consumers keep the tail (there ptxas serializes the wgmmas: C7513)."""
        if self.running and thread_row_sums(rule, self.running):
            self.alpha_due = self.prog.regs("f32", 2)
            for half in (0, 1):
                self.prog.emit("mov.f32", self.alpha_due[half], f32(1.0))   # block 0's: the total is still 0

    def fold(self, o, tag: str, factors=None) -> None:
        """Block references: the total rescaled by alpha and block o added times beta."""
        if not self.running:
            a, b = factors or (self.alpha, self.beta)
            emit_rescale(self.prog, self.total, a, tag)
            emit_fold(self.prog, o, self.total, b)

    def before_pv(self, tag: str) -> None:
        """Between S(j)'s issue and P(j - 1) V^T's: the rescale and the fold due under S."""
        if self.alpha_due is not None:
            emit_rescale(self.prog, self.total, self.alpha_due, tag)    # by alpha(j - 1), while S(j) runs
        if self.lag:
            self.fold(self.o_fixed, tag + "_LAG", (self.alpha_2, self.beta_2))   # block j - 2, while S(j) runs

    def issue_pv(self, block_slot: Reg):
        """P(j - 1) V^T issued: into a fresh accumulator (returned), or running into the total."""
        prog, c, total = self.prog, self.c, self.total
        _, v_tile, _, _ = stage(prog, c, block_slot)
        if not self.running:
            return emit_pv_issue(prog, c, self.p_regs, emit_descriptor(prog, v_tile), fresh=self.o_fixed)
        for half, part in enumerate(v_halves(prog, v_tile, len(total), c.layout.block_n)):
            emit_pv_issue(prog, c, self.p_regs, emit_descriptor(prog, part),
                          into=total[half * OUT_REGS:(half + 1) * OUT_REGS])
        return None

    def after_pv(self, sm, o, A: list[Reg], l: list[Reg], tag: str) -> None:
        """Once P(j - 1) V^T is done: running, the total's rescale by alpha(j) (or its factor
        kept for the next GEMM phase); block references, block j - 1 folded (or its factors kept
        for the next fold) and block j's reference update."""
        emit = self.prog.emit
        if self.running:
            if self.alpha_due is not None:
                for half in (0, 1):
                    emit("mov.f32", self.alpha_due[half], sm.alpha[half])
            else:
                emit_rescale(self.prog, self.total, sm.alpha, tag)
            return
        if self.lag:                                        # block j - 1's factors, for the next fold
            for half in (0, 1):
                emit("mov.f32", self.alpha_2[half], self.alpha[half])
                emit("mov.f32", self.beta_2[half], self.beta[half])
        else:
            self.fold(o, tag)
        self.prog.comment("block j's references: one exponential a row; alpha and the moves only when a row's")
        self.prog.comment("maximum passed A + 8 (a warp-uniform branch); block j - 1 is folded, so alpha may change")
        for half in (0, 1):
            emit("mov.f32", self.alpha[half], f32(1.0))
        emit_reference_moves(self.prog, sm, None, A, l, tag, self.alpha)


def emit_consumer_pipelined(prog: Program, c: Cta, tiles: TileLoop, rule: str, ones: Reg,
                            running: bool = False) -> None:
    """The pipelined FP8 consumer: S(j) and P(j - 1) V^T in one GEMM phase, then the softmax of
    S(j) while P(j - 1) V^T runs. Block references: P(j - 1) V^T into a fresh accumulator,
    folded into the total once done. ``running`` (the running-max reference): P(j - 1) V^T
    adds to the total itself, rescaled by alpha(j - 1) first (the exact rule: while S(j) runs);
    without the fold's registers Dv 256 fits this schedule too (128 output registers beside S)."""
    emit = prog.emit
    q_descs, d_ones, rows, t, it, base = _emit_fp8_tile_start(prog, c, tiles, ones)

    total, A, l = emit_accumulators(prog, c.layout.dv // 2)
    j, start_n, slot, prev_slot = prog.regs("u32", 4)
    emit("mov.u32", j, 0)
    emit_first_start(prog, c.tile, start_n)
    emit("mov.u32", slot, base)
    s = prog.regs("b32" if c.layout.int8_qk else "f32", c.layout.s_regs)   # int8_qk: int32 scores, then float
    carried = _Carried(prog, c, total, running)

    prog.comment("block 0: its GEMM phase has Q K^T alone" + ("; the total is still 0 (no rescale)" if running else ""))
    facs = _emit_scores_alone(prog, c, q_descs, rows, j, slot, s, "_FIRST")
    sm = emit_softmax(prog, c, rows, rule, start_n, s, d_ones, A, "_FIRST", facs=facs, running=running)
    emit_row_update(prog, sm, l, A)
    carried.keep(sm)
    carried.start_rescale_under_s(rule)

    if running:
        prog.comment("block j: GEMM phase S(j) + P(j - 1) V^T into the total; softmax of S(j); total *= alpha(j)")
        prog.comment("(the exact rule: at block j + 1's GEMM phase, between its S and P V^T issues)")
    else:
        prog.comment("block j: GEMM phase S(j) + P(j - 1) V^T; softmax of S(j); fold block j - 1. Two copies")
        prog.comment("of the loop: the blocks below the masked band (no mask test, no masked-row guard), the band's")
    band = prog.reg("pred")
    for tag, masked in BLOCK_LOOPS:
        emit_block_loop_head(prog, c, j, start_n, slot, prev_slot, f"BLOCK_LOOP{tag}")
        if masked:
            emit_below_again(prog, rows, start_n, "BELOW_BODY")   # a window's left band ends
            prog.label("BAND")
        else:
            emit_band_test(prog, rows, start_n, band)            # a window's left band: masked too
            emit("bra", "BAND", guard=band)
            emit_below_entry(prog, rows, "BELOW_BODY")
        emit_kv_wait(prog, c, slot, tag)
        emit_scores(prog, c, q_descs, slot, s, tag, wait=False)
        carried.before_pv(tag)
        o = carried.issue_pv(prev_slot)
        facs = _emit_block_factors(prog, c, rows, j)
        emit("wgmma.wait", 1 + (len(total) > OUT_REGS))         # S(j); P(j - 1) V^T may still run
        _emit_positive_rows(prog, c, s, facs, tag)
        sm = emit_softmax(prog, c, rows, rule, start_n, s, d_ones, A, tag, wait_rowsum=False, masked=masked,
                          deferred=not running, facs=facs, running=running)
        emit("wgmma.wait", 0)                              # P(j - 1) V^T and block j's row sums
        emit_release(prog, c, free_bar(prog, c, prev_slot))
        carried.after_pv(sm, o, A, l, tag)
        emit_row_update(prog, sm, l, A)
        carried.keep(sm)
        emit("bra", f"BLOCK_LOOP{tag}")

    prog.label("LAST_PV")
    carried.before_pv("_LAST")
    o = carried.issue_pv(prev_slot)
    emit("wgmma.wait", 0)
    emit_release(prog, c, free_bar(prog, c, prev_slot))
    emit_release(prog, c, tiles.q_free)                   # this tile's Q K^T are all done
    carried.fold(o, "_LAST")
    emit_row_sum_parts(prog, l, rule, running)
    emit_epilogue(prog, c, rows, total, A, l)
    emit_tile_end(prog, c, tiles, t, it, base)


def emit_consumer_blockwise(prog: Program, c: Cta, tiles: TileLoop, rule: str, ones: Reg) -> None:
    """The FP8 consumer at Dv 256: each key block in turn (block.emit_block: S, the softmax,
    P V^T in two halves of 128 columns, the fold), its stage released after its P V^T; the
    two consumers' GEMMs overlap each other's softmax. (The pipelined consumer keeps S(j) in
    flight beside P(j - 1) V^T: 64 + 64 + 128 accumulator registers at Dv 256, past the 240.)"""
    emit = prog.emit
    q_descs, d_ones, rows, t, it, base = _emit_fp8_tile_start(prog, c, tiles, ones)

    total, A, l = emit_accumulators(prog, c.layout.dv // 2)
    j, start_n, slot = prog.regs("u32", 3)
    emit("mov.u32", j, 0)
    emit_first_start(prog, c.tile, start_n)
    emit("mov.u32", slot, base)
    s = prog.regs("b32" if c.layout.int8_qk else "f32", c.layout.s_regs)   # int8_qk: int32 scores, then float
    more = prog.reg("pred")
    prog.label("BLOCK_LOOP")
    facs = _emit_scores_alone(prog, c, q_descs, rows, j, slot, s, "")
    emit_block(prog, c, rows, rule, slot, start_n, s, d_ones, total, A, l, facs=facs)
    emit_release(prog, c, free_bar(prog, c, slot))
    emit("add.u32", j, j, 1)
    emit("add.u32", slot, slot, 1)
    emit("add.u32", start_n, start_n, c.layout.block_n)
    emit("setp.lt.u32", more, j, c.tile.n_blocks)
    emit("bra", "BLOCK_LOOP", guard=more)

    emit_release(prog, c, tiles.q_free)                   # this tile's Q K^T are all done
    emit_epilogue(prog, c, rows, total, A, l)
    emit_tile_end(prog, c, tiles, t, it, base)
