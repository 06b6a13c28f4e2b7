"""The warp-specialized kernels' tile loop: which tile of query rows (a CTA's consumers'
rows) each CTA runs next. A dense launch gives every tile its own CTA (its next, t +
nctaid.x, is past the last). A packed launch (Layout.tile_counter) runs a CTA an SM that
draws tiles from a counter in global memory in the order the host lists
(kernels._tile_order, which lists no tile past its sequence's queries), the producer handing
each to its consumers in shared memory with their Q tiles.
"""
from __future__ import annotations

import dataclasses

from ..program import Program, Reg
from .cta import Cta, emit_rows, emit_work
from .layout import BLOCK_M
from .smem import emit_wait


@dataclasses.dataclass(frozen=True)
class TileLoop:
    """The tiles of 128 query rows, heaviest first: query tile fastest within a (batch, head),
    or (Layout.tile_counter) numbered query tile slowest over the whole batch (tile t: query
    tile per_head - 1 - t / heads_batch of (batch, head) t % heads_batch), taken in the order
    the host lists."""
    per_head: Reg           # query tiles a (batch, head)
    count: Reg              # tiles in all
    q_free: Reg             # mbarrier: the consumers are done with the Q tiles
    heads_batch: Reg | None = None   # tile_counter: heads x batch entries
    word: Reg | None = None          # tile_counter: the shared word that hands the consumers their tile
    order: Reg | None = None         # tile_counter: the counter in global memory, then the tile order
    draws: Reg | None = None         # tile_counter: the tiles listed (draws past them end the CTA)


def emit_tile_loop(prog: Program, c: Cta, q_free: Reg) -> TileLoop:
    """The launch's tile count and (tile_counter) the registers of the host's order."""
    emit, params, layout = prog.emit, c.params, c.layout
    per_head, count = prog.regs("u32", 2)
    rows = BLOCK_M * layout.consumers                      # a tile's query rows
    emit("add.u32", per_head, params.seqlen_q, rows - 1)
    if rows & (rows - 1):
        emit("div.u32", per_head, per_head, rows)
    else:
        emit("shr.u32", per_head, per_head, rows.bit_length() - 1)
    emit("mul.lo.u32", count, per_head, params.heads)
    emit("mul.lo.u32", count, count, params.batch)
    if not layout.tile_counter:
        return TileLoop(per_head, count, q_free)
    heads_batch, word = prog.regs("u32", 2)
    emit("mul.lo.u32", heads_batch, params.heads, params.batch)
    emit("add.u32", word, c.shared.base, layout.tile_word_offset)
    return TileLoop(per_head, count, q_free, heads_batch, word, params.tile_order, params.tile_draws)


def emit_first_tile(prog: Program, tiles: TileLoop, t: Reg) -> None:
    """t: the producer's first tile: its CTA's index, or (tile_counter) the tile of that draw."""
    prog.emit("mov.u32", t, "%ctaid.x")
    if tiles.order is not None:
        first = prog.reg("u32")
        prog.emit("mov.u32", first, t)
        _emit_tile_of_draw(prog, tiles, first, t)


def emit_tile_loop_head(prog: Program, c: Cta, tiles: TileLoop, t: Reg, label: str,
                         handed_it: Reg | None = None) -> None:
    """At ``label``: leave for {label}_DONE once tile ``t`` is past the last, else the tile's
    work. ``handed_it``: a consumer of a tile_counter launch, its tiles so far: the producer
    hands it tile t in shared memory with the Q tiles (waited for here), never an empty one."""
    done = prog.reg("pred")
    handed = handed_it is not None
    prog.label(label)
    if handed:
        emit_q_wait(prog, c, handed_it)
        emit_handed_tile(prog, c, tiles, t)
    prog.emit("setp.ge.u32", done, t, tiles.count)
    prog.emit("bra.div", f"{label}_DONE", guard=done)
    emit_tile_work(prog, c, tiles, t)


def emit_handed_tile(prog: Program, c: Cta, tiles: TileLoop, t: Reg) -> None:
    """A consumer of a tile_counter launch, its Q tiles landed: t = the tile the producer handed
    over, read by lane 0 alone (the lane that arrives on q_free for its warp, after which the
    producer writes the next tile there) and passed on: no other lane's read to order."""
    prog.emit("ld.shared.b32", t, tiles.word, guard=c.thread.lane0)
    prog.emit("shfl.idx0", t, t)


def emit_tile_work(prog: Program, c: Cta, tiles: TileLoop, t: Reg) -> None:
    """The tile registers (cta.emit_work) of tile ``t``, which is not past the last."""
    ty, bh = prog.regs("u32", 2)
    if tiles.heads_batch is not None:                     # query tile slowest: across the batch
        prog.emit("div.u32", ty, t, tiles.heads_batch)
        prog.emit("rem.u32", bh, t, tiles.heads_batch)
    else:
        prog.emit("rem.u32", ty, t, tiles.per_head)
        prog.emit("div.u32", bh, t, tiles.per_head)
    prog.emit("sub.u32", ty, tiles.per_head, ty)
    prog.emit("sub.u32", ty, ty, 1)                       # heaviest query tile first
    emit_work(prog, c.params, c.thread, c.tile, c.layout, ty, bh)


def emit_q_wait(prog: Program, c: Cta, it: Reg, tag: str = "") -> None:
    """A consumer: wait until its tile's Q tiles have landed (``it``: its tiles so far)."""
    emit_wait(prog, c.shared.bar_q, phase_of(prog, it), f"WAIT_Q{tag}")   # 16-bit: c > 0, softmax_scale is positive


def emit_next_t(prog: Program, tiles: TileLoop, t: Reg) -> None:
    """t: the CTA's next tile: t + nctaid.x, or (tile_counter) the tile of draw nctaid.x +
    the counter's count so far (each CTA's first draw is its own index)."""
    n = prog.reg("u32")
    prog.emit("mov.u32", n, "%nctaid.x")
    if tiles.order is None:
        prog.emit("add.u32", t, t, n)
        return
    d = prog.reg("u32")
    prog.emit("atom.global.add.u32", d, tiles.order, 1)
    prog.emit("add.u32", d, d, n)
    _emit_tile_of_draw(prog, tiles, d, t)


def _emit_tile_of_draw(prog: Program, tiles: TileLoop, d: Reg, t: Reg) -> None:
    """tile_counter: t = the tile of draw d, the word after the counter at d, or a tile past
    the last once the draws are spent."""
    emit = prog.emit
    more = prog.reg("pred")
    off, addr = prog.regs("u64", 2)
    emit("setp.lt.u32", more, d, tiles.draws)
    emit("mov.u32", t, tiles.count)
    emit("mul.wide.u32", off, d, 4)
    emit("add.u64", addr, tiles.order, off)
    emit("add.u64", addr, addr, 4)
    emit("ld.global.u32", t, addr, guard=more)


def phase_of(prog: Program, count: Reg, flip: bool = False) -> Reg:
    """The mbarrier parity of use number ``count`` of a barrier used once per round (a
    waiter for "free" waits for the previous round: ``flip``)."""
    phase = prog.reg("u32")
    prog.emit("and.b32", phase, count, 1)
    if flip:
        prog.emit("xor.b32", phase, phase, 1)              # a fresh barrier has completed "round -1"
    return phase


def emit_tile_entry(prog: Program, c: Cta, tiles: TileLoop) -> tuple:
    """A consumer's tile loop: its counters (t the tile, it the tiles done, base the load
    number of the tile's block 0), the loop's head (label TILE), the tile's rows, Q landed.
    Returns (rows, t, it, base)."""
    emit = prog.emit
    t, it, base = prog.regs("u32", 3)
    handed = tiles.word is not None
    if not handed:
        emit("mov.u32", t, "%ctaid.x")
    emit("mov.u32", it, 0)
    emit("mov.u32", base, 0)

    emit_tile_loop_head(prog, c, tiles, t, "TILE", handed_it=it if handed else None)
    rows = emit_rows(prog, c.params, c.thread, c.tile, c.layout.dv)
    if not handed:
        emit_q_wait(prog, c, it)
    return rows, t, it, base


def emit_tile_end(prog: Program, c: Cta, tiles: TileLoop, t: Reg, it: Reg, base: Reg) -> None:
    """A consumer after a tile's epilogue: its block slots advanced, on to the next tile."""
    prog.emit("add.u32", base, base, c.tile.n_blocks)
    if tiles.word is None:
        emit_next_t(prog, tiles, t)
    prog.emit("add.u32", it, it, 1)
    prog.emit("bra.div", "TILE")
    prog.label("TILE_DONE")
