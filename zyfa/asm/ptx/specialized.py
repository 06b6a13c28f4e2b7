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
mbarriers' phases). Here: the producer and the choice of consumer; consumer_fp8.py the FP8
ones, consumer16.py the 16-bit one, consumer.py what they share. Which head dims run this schedule, and why: layout.layout_for.
"""
from __future__ import annotations

from ..program import Program, Reg
from .consumer import free_bar, v_bar
from .consumer16 import emit_consumer_16
from .consumer_fp8 import emit_consumer_blockwise, emit_consumer_pipelined
from .cta import Cta, emit_prologue
from .layout import BLOCK_M, HEAD_DIM, Layout
from .loads import (emit_first_key, emit_k_rows, emit_kv_load, emit_q_load, emit_ring_position, emit_setup,
                    emit_v_rows, stage)
from .smem import emit_wait
from .tile_loop import TileLoop, emit_first_tile, emit_next_t, emit_tile_loop, emit_tile_loop_head, phase_of


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
        emit_consumer_blockwise(prog, c, tiles, rule, ones)
    elif layout.is_fp8:
        emit_consumer_pipelined(prog, c, tiles, rule, ones, running)
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
