"""What the warp-specialized kernel's consumers share: their registers and Q tile, the stage
ring's mbarriers (a stage's "free"; split_kv: V's "full" and "free"), and the block loop's head."""
from __future__ import annotations

from ..program import Program, Reg
from .scores import emit_q_descriptors
from .cta import Cta
from .loads import emit_ring_position
from .smem import emit_descriptor, emit_wait
from .tile_loop import phase_of

# a consumer's registers after setmaxnreg (two consumers, or three at 16-bit d64)
CONSUMER_REGISTERS = {2: 240, 3: 160}
Q_BARRIER = 3                          # named barriers 3, 4 (, 5): each consumer's own 128 threads


def emit_block_loop_head(prog: Program, c: Cta, j: Reg, start_n: Reg, slot: Reg, prev_slot: Reg,
                          label: str = "BLOCK_LOOP", end: Reg | None = None, past_end: str = "LAST_PV") -> None:
    """``label``: on to block j + 1 (its load number, first key); from block ``end`` (default:
    past the tile's last block) on to ``past_end``."""
    last = prog.reg("pred")
    prog.label(label)
    emit_next_block(prog, c, j, start_n, slot, prev_slot)
    prog.emit("setp.ge.u32", last, j, c.tile.n_blocks if end is None else end)
    prog.emit("bra", past_end, guard=last)


def emit_next_block(prog: Program, c: Cta, j: Reg, start_n: Reg, slot: Reg, prev_slot: Reg) -> None:
    """On to block j + 1: its load number (``slot``; ``prev_slot`` the last), its first key."""
    prog.emit("mov.u32", prev_slot, slot)
    prog.emit("add.u32", slot, slot, 1)
    prog.emit("add.u32", j, j, 1)
    prog.emit("add.u32", start_n, start_n, c.layout.block_n)


def emit_release(prog: Program, c: Cta, bar: Reg) -> None:
    """One arrival per warp on the "free" mbarrier at ``bar``."""
    prog.emit("mbarrier.arrive", bar, guard=c.thread.lane0)


def free_bar(prog: Program, c: Cta, slot: Reg) -> Reg:
    """The "free" mbarrier of load number ``slot``'s stage."""
    bar = prog.reg("u32")
    stage_, _ = emit_ring_position(prog, c.layout.stages, slot)
    prog.emit("mad.lo.u32", bar, stage_, 8, c.shared.free0)
    return bar


def v_bar(prog: Program, c: Cta, slot: Reg, first: Reg) -> Reg:
    """split_kv: V's "full" (``first`` = shared.v_full0) or "free" (v_free0) mbarrier of load
    number ``slot``'s stage."""
    bar = prog.reg("u32")
    stage_, _ = emit_ring_position(prog, c.layout.stages, slot)
    prog.emit("mad.lo.u32", bar, stage_, 8, first)
    return bar


def emit_v_wait(prog: Program, c: Cta, slot: Reg, tag: str) -> None:
    """split_kv: spin until load number ``slot``'s V has landed."""
    _, rounds = emit_ring_position(prog, c.layout.stages, slot)
    emit_wait(prog, v_bar(prog, c, slot, c.shared.v_full0), phase_of(prog, rounds), f"WAIT_V{tag}")


def emit_consumer_start(prog: Program, c: Cta) -> tuple[Reg, Reg, list[list[Reg]]]:
    """A consumer's registers, its Q tile and Q's descriptors (the same for every tile);
    returns (q_sync, q_tile, q_descs)."""
    emit = prog.emit
    emit("setmaxnreg.inc", CONSUMER_REGISTERS[c.layout.consumers])
    q_sync, q_tile = prog.regs("u32", 2)
    emit("add.u32", q_sync, c.thread.wg, Q_BARRIER - 1)
    emit("mad.lo.u32", q_tile, c.thread.wg, c.layout.q_bytes, c.shared.base)
    emit("sub.u32", q_tile, q_tile, c.layout.q_bytes)
    dq = emit_descriptor(prog, q_tile, c.layout.qk_tiles[0][1])
    return q_sync, q_tile, emit_q_descriptors(prog, c, q_tile, dq)
