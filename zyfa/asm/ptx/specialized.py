"""The warp-specialized schedule of the generated Hopper kernel (the default for MLA's head
dims 192 / 128): FlashAttention-3's structure around the same block step (block.py) as the
serial kernel.

One CTA = 128 query rows of one head, 384 threads (16-bit d64: 192 rows, 512 threads):
  warpgroup 0  producer: gives up registers (setmaxnreg 24); thread 0 loads each key
               block's K and V^T by TMA into a ring of four stages, waiting for a stage's
               "free" mbarrier (one arrival per consumer warp) before reuse
  warpgroups 1, 2 (, 3)  consumers of 64 rows each (setmaxnreg 240; three: 160); per key
               block j one GEMM phase, S(j) = Q K_j^T and P(j-1) V_{j-1}^T issued together,
               then the softmax of S(j) while the tensor cores run the phase

The arithmetic is the serial kernel's, block by block (total = total * alpha + block * beta
in the same order), so the outputs are bit-identical to it. A CTA runs a loop over tiles
(tile_loop.py: one tile a CTA for a dense launch; a packed launch's CTAs draw them from a
counter) and counts its loads across them (the stage ring's position) and its tiles (the Q
mbarriers' phases). Here: the producer and the FP8 consumers; consumer16.py the 16-bit one,
consumer.py what they share. Which head dims run this schedule, and why: layout.layout_for.
"""
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
from .consumer import emit_block_loop_head, emit_consumer_start, emit_release, free_bar, v_bar
from .consumer16 import emit_consumer_16
from .cta import Cta, Rows, emit_positive_factor, emit_prologue
from .epilogue import emit_epilogue
from .int8_qk import emit_block_factors, emit_int8_scores
from .layout import BLOCK_M, HEAD_DIM, OUT_REGS, THREADS, Layout
from .lean_p import thread_row_sums
from .loads import (emit_first_key, emit_k_rows, emit_kv_load, emit_kv_wait, emit_q_load, emit_ring_position,
                    emit_setup, emit_v_rows, stage)
from .scores import emit_scores
from .smem import emit_descriptor, emit_wait
from .softmax import emit_row_sum_parts, emit_softmax
from .target import f32
from .tile_loop import (TileLoop, emit_first_tile, emit_next_t, emit_tile_end, emit_tile_entry, emit_tile_loop,
                        emit_tile_loop_head, phase_of)
from .window import emit_band_test, emit_below_again, emit_below_entry, emit_first_start

PRODUCER_REGISTERS = 24
# what the launch allots every thread (the register file's 64K over 128 threads a warpgroup,
# the producer's share given back; consumer.CONSUMER_REGISTERS after setmaxnreg)
LAUNCH_REGISTERS = {2: 168, 3: 128}


def consumer_warps(layout: Layout) -> int:
    """Arrivals that free a stage, or the Q tiles: one a consumer warp."""
    return 4 * layout.consumers


def emit_specialized(prog: Program, rule: str, causal: bool, layout: Layout, running: bool = False) -> None:
    emit = prog.emit
    c, _ = emit_prologue(prog, causal, layout)
    producer = prog.reg("pred")
    emit("setp.eq.u32", producer, c.thread.wg, 0)
    # mbarriers: Q full, stages full, stages free, Q free (split_kv: then V full, V free)
    n = layout.stages
    warps = consumer_warps(layout)
    counts = [1] + [1] * n + [warps] * (n + 1)
    if layout.split_kv:                                    # V full, V free
        counts += [1] * n + [warps] * n
    ones = emit_setup(prog, c, rule, counts, writers=producer, running=running)
    emit("bra", "PRODUCER", guard=producer)

    tiles = _emit_tiles(prog, c)
    if layout.is_fp8 and layout.dv > HEAD_DIM and not running:
        _emit_consumer_blockwise(prog, c, tiles, rule, ones)
    elif layout.is_fp8:
        _emit_consumer(prog, c, tiles, rule, ones, running)
    else:
        emit_consumer_16(prog, c, tiles)
    emit("ret")
    prog.label("PRODUCER")
    _emit_producer(prog, c, _emit_tiles(prog, c))
    emit("ret")


def _emit_tiles(prog: Program, c: Cta) -> TileLoop:
    """The tile loop's registers, made by each role after the split (none live across it)."""
    q_free = prog.reg("u32")
    prog.emit("add.u32", q_free, c.shared.free0, 8 * c.layout.stages)
    return emit_tile_loop(prog, c, q_free)


def _emit_producer(prog: Program, c: Cta, tiles: TileLoop) -> None:
    """Thread 0: per tile, the consumers' Q tiles once they are done with the last ones,
    then its key blocks, each once its stage is free again; from a CTA's second tile on,
    key block 0 before Q, so that it lands while the consumers finish the last tile (whose
    final blocks free its stage), while a CTA's first Q goes ahead of its first K and V. A
    packed launch also prefetches the tile's Q into L2 before key block 0 (+0-2% on the H200).
    With split_kv (the 16-bit kernels) K goes a block ahead of V (_emit_split_producer)."""
    emit = prog.emit
    tile = c.tile
    emit("setmaxnreg.dec", PRODUCER_REGISTERS)
    emit("bra.div", "PRODUCER_DONE", guard=f"!{c.thread.leader}")
    t, it, slot, j = prog.regs("u32", 4)
    emit_first_tile(prog, tiles, t)
    emit("mov.u32", it, 0)
    emit("mov.u32", slot, 0)
    emit_tile_loop_head(prog, c, tiles, t, "PRODUCE_TILE")
    emit("mov.u32", j, 0)
    first_tile = prog.reg("pred")
    emit("setp.eq.u32", first_tile, it, 0)
    emit("bra.div", "LOAD_Q", guard=first_tile)         # the CTA's first tile: Q first, nothing to overlap
    if c.layout.tile_counter:       # Q into L2 now: its load waits until the consumers finish the last tile
        for _, row in _q_tiles(prog, c):
            emit_q_load(prog, c, None, row)
    if c.layout.split_kv:
        _emit_split_producer(prog, c, tiles, t, it, j, slot)
        return
    _emit_block_load(prog, c, j, slot, "_FIRST")         # every tile has a block 0
    _emit_q_tile_load(prog, c, tiles, t, it)
    done = prog.reg("pred")
    prog.label("LOAD_LOOP")
    emit("setp.ge.u32", done, j, tile.n_blocks)
    emit("bra.div", "TILE_LOADED", guard=done)
    _emit_block_load(prog, c, j, slot, "")
    emit("bra.div", "LOAD_LOOP")
    _emit_producer_end(prog, c, tiles, t, it)


def _emit_q_tile_load(prog: Program, c: Cta, tiles: TileLoop, t: Reg, it: Reg) -> None:
    """Label LOAD_Q: the tile's Q tiles once the consumers have freed the last ones, the
    consumers' tile word (tile_counter) released with them."""
    prog.label("LOAD_Q")
    emit_wait(prog, tiles.q_free, phase_of(prog, it, flip=True), "WAIT_Q_FREE")
    if tiles.word is not None:                            # the consumers' tile, released with the Q tiles
        prog.emit("st.shared.b32", tiles.word, t)
    q_tiles = _q_tiles(prog, c)
    prog.emit("mbarrier.expect_tx", c.shared.bar_q, c.layout.consumers * c.layout.q_bytes)
    for q_k, row in q_tiles:
        emit_q_load(prog, c, q_k, row)


def _emit_producer_end(prog: Program, c: Cta, tiles: TileLoop, t: Reg, it: Reg) -> None:
    """Label TILE_LOADED: on to the next tile; then the producer's end."""
    prog.label("TILE_LOADED")
    emit_next_t(prog, tiles, t)
    prog.emit("add.u32", it, it, 1)
    prog.emit("bra.div", "PRODUCE_TILE")
    prog.label("PRODUCE_TILE_DONE")
    if tiles.word is not None:                            # the end, handed over as a tile past the last
        emit_wait(prog, tiles.q_free, phase_of(prog, it, flip=True), "WAIT_Q_FREE_END")
        prog.emit("st.shared.b32", tiles.word, tiles.count)
        prog.emit("mbarrier.arrive", c.shared.bar_q)
    prog.label("PRODUCER_DONE")


def _emit_split_producer(prog: Program, c: Cta, tiles: TileLoop, t: Reg, it: Reg, j: Reg, slot: Reg) -> None:
    """The rest of _emit_producer with split_kv, FlashAttention-3's order: K(0), Q, then K(j)
    before V(j - 1), V(n - 1) last (a CTA's first tile: Q, then K(0)). K(j) waits only for
    S(j - stages) to be done; loaded after V(j - 1) it also waited for P V(j - 1 - stages), a
    softmax later, and reached the consumers late at d256's two stages. ``slot`` counts K's
    loads; V's count runs a block behind it (v_slot)."""
    emit, tile = prog.emit, c.tile
    v_block, v_slot = prog.regs("u32", 2)
    _emit_k_load(prog, c, j, slot, "_FIRST")                # every tile has a block 0
    _emit_q_tile_load(prog, c, tiles, t, it)
    k0_loaded = prog.reg("pred")
    emit("setp.gt.u32", k0_loaded, j, 0)
    emit("bra.div", "LOAD_LOOP", guard=k0_loaded)
    _emit_k_load(prog, c, j, slot, "_FIRST_TILE")          # the CTA's first tile: K(0) after Q
    done = prog.reg("pred")
    prog.label("LOAD_LOOP")
    emit("sub.u32", v_block, j, 1)                        # V(j - 1): K(j - 1)'s stage and load number
    emit("sub.u32", v_slot, slot, 1)
    emit("setp.ge.u32", done, j, tile.n_blocks)
    emit("bra.div", "LAST_V", guard=done)
    _emit_k_load(prog, c, j, slot, "")
    _emit_v_load(prog, c, v_block, v_slot, "")
    emit("bra.div", "LOAD_LOOP")
    prog.label("LAST_V")
    _emit_v_load(prog, c, v_block, v_slot, "_LAST")
    _emit_producer_end(prog, c, tiles, t, it)


def _emit_k_load(prog: Program, c: Cta, j: Reg, slot: Reg, tag: str) -> None:
    """split_kv: K(j) into load number ``slot``'s stage once its K is free; j and slot advanced."""
    k_tile, _, bar, _ = stage(prog, c, slot)
    _, rounds = emit_ring_position(prog, c.layout.stages, slot)
    emit_wait(prog, free_bar(prog, c, slot), phase_of(prog, rounds, flip=True), f"WAIT_FREE{tag}")
    key0 = emit_first_key(prog, c, j)
    prog.emit("mbarrier.expect_tx", bar, c.layout.k_bytes)
    emit_k_rows(prog, c, k_tile, key0, bar)
    prog.emit("add.u32", j, j, 1)
    prog.emit("add.u32", slot, slot, 1)


def _emit_v_load(prog: Program, c: Cta, block: Reg, v_slot: Reg, tag: str) -> None:
    """split_kv: V(block) (load number ``v_slot``, K(block)'s) once its stage's V is free."""
    _, v_tile, _, _ = stage(prog, c, v_slot)
    _, rounds = emit_ring_position(prog, c.layout.stages, v_slot)
    emit_wait(prog, v_bar(prog, c, v_slot, c.shared.v_free0), phase_of(prog, rounds, flip=True), f"WAIT_V_FREE{tag}")
    key0 = emit_first_key(prog, c, block)
    v_full = v_bar(prog, c, v_slot, c.shared.v_full0)
    prog.emit("mbarrier.expect_tx", v_full, c.layout.stage_bytes - c.layout.k_bytes)
    emit_v_rows(prog, c, v_tile, key0, v_full)


def _q_tiles(prog: Program, c: Cta) -> list[tuple[Reg, Reg]]:
    """(shared address, first row) of each consumer's Q tile of the tile in c.tile."""
    q_tiles = [(c.shared.base, c.tile.tile_m)]
    for k in range(1, c.layout.consumers):                # consumer k + 1's Q tile and rows
        row, q_k = prog.regs("u32", 2)
        prog.emit("add.u32", row, c.tile.tile_m, k * BLOCK_M)
        prog.emit("add.u32", q_k, c.shared.base, k * c.layout.q_bytes)
        q_tiles.append((q_k, row))
    return q_tiles


def _emit_block_load(prog: Program, c: Cta, j: Reg, slot: Reg, tag: str) -> None:
    """Key block j into load number ``slot``'s stage once it is free (K and V as one, not
    split_kv); j and slot advanced."""
    _, rounds = emit_ring_position(prog, c.layout.stages, slot)
    emit_wait(prog, free_bar(prog, c, slot), phase_of(prog, rounds, flip=True), f"WAIT_FREE{tag}")
    emit_kv_load(prog, c, j, slot)
    prog.emit("add.u32", j, j, 1)
    prog.emit("add.u32", slot, slot, 1)


def _emit_fp8_tile_start(prog: Program, c: Cta, tiles: TileLoop, ones: Reg) -> tuple:
    """An FP8 consumer up to its tile's work: registers taken, the ones tile's descriptor, the
    tile loop's head (label TILE), the tile's rows, Q landed and its factor made positive.
    Returns (q_tile, q_descs, d_ones, rows, t, it, base); base: the load number of the tile's block 0."""
    q_sync, q_tile, q_descs = emit_consumer_start(prog, c)
    d_ones = emit_descriptor(prog, ones) if ones is not None else None
    rows, t, it, base = emit_tile_entry(prog, c, tiles)
    if not c.layout.int8_qk:                # int8_qk: the rows' factors a block (_emit_int8_scores)
        emit_positive_factor(prog, c, rows, q_tile, sync=lambda: prog.emit("bar.sync.n", q_sync, THREADS))
    return q_tile, q_descs, d_ones, rows, t, it, base


def _emit_block_factors(prog: Program, c: Cta, rows: Rows, j: Reg) -> list[Reg] | None:
    """int8_qk: key block j's two row factors, loaded while its S runs (else None)."""
    return emit_block_factors(prog, rows, j) if c.layout.int8_qk else None


def _emit_int8_scores(prog: Program, c: Cta, s: list[Reg], facs: list[Reg] | None, tag: str) -> None:
    """int8_qk, once S is done: the int32 scores as floats, rows with negative factors flipped."""
    if c.layout.int8_qk:
        emit_int8_scores(prog, s, facs, tag)


def _emit_scores_alone(prog: Program, c: Cta, q_descs, rows: Rows, j: Reg, slot: Reg, s: list[Reg],
                       tag: str) -> list[Reg] | None:
    """S(j) = Q K_j^T in a GEMM phase of its own, waited for (int8_qk: as floats); returns the
    block's int8 row factors (else None)."""
    emit_kv_wait(prog, c, slot, tag)
    emit_scores(prog, c, q_descs, slot, s, tag, wait=False)
    facs = _emit_block_factors(prog, c, rows, j)
    prog.emit("wgmma.wait", 0)
    _emit_int8_scores(prog, c, s, facs, tag)
    return facs


# lab switch for run 24's A/B (removed after it): with block references, the pipelined consumer
# folds block j - 2's P V^T while S(j) runs instead of block j - 1's after the P V^T wait
FOLD_UNDER_S = True


def _emit_consumer(prog: Program, c: Cta, tiles: TileLoop, rule: str, ones: Reg, running: bool = False) -> None:
    """The pipelined FP8 consumer: S(j) and P(j - 1) V^T in one GEMM phase, then the softmax of
    S(j) while P(j - 1) V^T runs. Block references: P(j - 1) V^T into a fresh accumulator,
    folded into the total once done. ``running`` (the running-max reference): P(j - 1) V^T
    adds to the total itself, rescaled by alpha(j - 1) first (the exact rule: while S(j) runs);
    without the fold's registers Dv 256 fits this schedule too (128 output registers beside S)."""
    emit = prog.emit
    _, q_descs, d_ones, rows, t, it, base = _emit_fp8_tile_start(prog, c, tiles, ones)

    total, A, l = emit_accumulators(prog, c.layout.dv // 2)
    j, start_n, slot, prev_slot = prog.regs("u32", 4)
    emit("mov.u32", j, 0)
    emit_first_start(prog, c.tile, start_n)
    emit("mov.u32", slot, base)
    s = prog.regs("b32" if c.layout.int8_qk else "f32", c.layout.s_regs)   # int8_qk: int32 scores, then float
    p_regs = [prog.regs("b32", 4) for _ in range(c.layout.p_steps)]   # P(j - 1): A of the P V^T in flight
    alpha, beta = (None, None) if running else (prog.regs("f32", 2), prog.regs("f32", 2))

    def keep(sm) -> None:
        """P of this block for its P V^T, issued in the next GEMM phase; block references: its
        alpha (unless the reference update left it in place) and beta too."""
        for k in range(len(p_regs)):
            for r in range(4):
                emit("mov.b32", p_regs[k][r], sm.p_regs[k][r])
        for half in (() if running else (0, 1)):
            if sm.alpha is not None:
                emit("mov.f32", alpha[half], sm.alpha[half])
            emit("mov.f32", beta[half], sm.beta[half])

    def fold(o, tag: str, factors=None) -> None:
        if not running:
            a, b = factors or (alpha, beta)
            emit_rescale(prog, total, a, tag)
            emit_fold(prog, o, total, b)

    # block references (FOLD_UNDER_S): block j - 2's P V^T, waited for in block j - 1, is folded
    # while S(j) runs, before P(j - 1) V^T is issued into the same registers; its factors kept a
    # block longer (alpha_2, beta_2). Before block 0's: o = 0, alpha_2 = 1, beta_2 = 0 (no change)
    lag = not running and FOLD_UNDER_S and not (c.layout.int8_qk and c.layout.window)   # that one spills
    o_fixed = prog.regs("f32", OUT_REGS) if lag else None
    alpha_2, beta_2 = (prog.regs("f32", 2), prog.regs("f32", 2)) if lag else (None, None)
    for half in (0, 1) if lag else ():
        emit("mov.f32", alpha_2[half], f32(1.0))
        emit("mov.f32", beta_2[half], f32(0.0))
    for oi in o_fixed or ():
        emit("mov.f32", oi, f32(0.0))

    def issue_pv(block_slot):
        """P(j - 1) V^T issued: into a fresh accumulator (returned), or running into the total."""
        _, v_tile, _, _ = stage(prog, c, block_slot)
        if not running:
            return emit_pv_issue(prog, c, p_regs, emit_descriptor(prog, v_tile), fresh=o_fixed)
        for half, part in enumerate(v_halves(prog, v_tile, len(total), c.layout.block_n)):
            emit_pv_issue(prog, c, p_regs, emit_descriptor(prog, part), into=total[half * OUT_REGS:(half + 1) * OUT_REGS])
        return None

    prog.comment("block 0: its GEMM phase has Q K^T alone" + ("; the total is still 0 (no rescale)" if running else ""))
    facs = _emit_scores_alone(prog, c, q_descs, rows, j, slot, s, "_FIRST")
    sm = emit_softmax(prog, c, rows, rule, start_n, s, d_ones, A, "_FIRST", facs=facs, running=running)
    emit_row_update(prog, sm, l, A)
    keep(sm)
    # running with the exact rule: the total takes alpha(j - 1) while S(j) runs, before P(j - 1) V^T
    # is issued (FlashAttention-3's order), not in the tail after the P V^T wait; the lean rules'
    # consumers keep the tail (there ptxas serializes the wgmmas: C7513)
    under_s = running and thread_row_sums(rule, running)
    alpha_due = prog.regs("f32", 2) if under_s else None   # the factor the total takes before P(j - 1) V^T
    for half in (0, 1) if under_s else ():
        emit("mov.f32", alpha_due[half], f32(1.0))      # block 0's: the total is still 0

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
        if under_s:
            emit_rescale(prog, total, alpha_due, tag)       # by alpha(j - 1), while S(j) runs
        if lag:
            fold(o_fixed, tag + "_LAG", (alpha_2, beta_2))  # block j - 2, while S(j) runs
        o = issue_pv(prev_slot)
        facs = _emit_block_factors(prog, c, rows, j)
        emit("wgmma.wait", 1 + (len(total) > OUT_REGS))         # S(j); P(j - 1) V^T may still run
        _emit_int8_scores(prog, c, s, facs, tag)
        sm = emit_softmax(prog, c, rows, rule, start_n, s, d_ones, A, tag, wait_rowsum=False, masked=masked,
                          deferred=not running, facs=facs, running=running)
        emit("wgmma.wait", 0)                              # P(j - 1) V^T and block j's row sums
        emit_release(prog, c, free_bar(prog, c, prev_slot))
        if running:
            if under_s:
                for half in (0, 1):
                    emit("mov.f32", alpha_due[half], sm.alpha[half])
            else:
                emit_rescale(prog, total, sm.alpha, tag)
        else:
            if lag:                                        # block j - 1's factors, for the next fold
                for half in (0, 1):
                    emit("mov.f32", alpha_2[half], alpha[half])
                    emit("mov.f32", beta_2[half], beta[half])
            else:
                fold(o, tag)
            prog.comment("block j's references: one exponential a row; alpha and the moves only when a row's")
            prog.comment("maximum passed A + 8 (a warp-uniform branch); block j - 1 is folded, so alpha may change")
            for half in (0, 1):
                emit("mov.f32", alpha[half], f32(1.0))
            emit_reference_moves(prog, sm, None, A, l, tag, alpha)
        emit_row_update(prog, sm, l, A)
        keep(sm)
        emit("bra", f"BLOCK_LOOP{tag}")

    prog.label("LAST_PV")
    if under_s:
        emit_rescale(prog, total, alpha_due, "_LAST")
    if lag:
        fold(o_fixed, "_LAST_LAG", (alpha_2, beta_2))     # block n - 2
    o = issue_pv(prev_slot)
    emit("wgmma.wait", 0)
    emit_release(prog, c, free_bar(prog, c, prev_slot))
    emit_release(prog, c, tiles.q_free)                   # this tile's Q K^T are all done
    fold(o, "_LAST")
    emit_row_sum_parts(prog, l, rule, running)
    emit_epilogue(prog, c, rows, total, A, l)
    emit_tile_end(prog, c, tiles, t, it, base)


def _emit_consumer_blockwise(prog: Program, c: Cta, tiles: TileLoop, rule: str, ones: Reg) -> None:
    """The FP8 consumer at Dv 256: each key block in turn (block.emit_block: S, the softmax,
    P V^T in two halves of 128 columns, the fold), its stage released after its P V^T; the
    two consumers' GEMMs overlap each other's softmax. (_emit_consumer keeps S(j) in flight
    beside P(j - 1) V^T: 64 + 64 + 128 accumulator registers at Dv 256, past the 240.)"""
    emit = prog.emit
    _, q_descs, d_ones, rows, t, it, base = _emit_fp8_tile_start(prog, c, tiles, ones)

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
