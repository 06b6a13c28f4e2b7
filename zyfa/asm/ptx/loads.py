"""The CTA's mbarriers and TMA loads in the generated Hopper kernel: the ring of K / V^T
stages (which stage, buffer and mbarrier phase a key block uses), the loads of Q and of a
key block, and the setup of the mbarriers and the ones tile."""
from __future__ import annotations

from ..program import Program, Reg
from .cta import Cta
from .layout import BLOCK_N, HEAD_DIM, KV_BYTES, ONES_BYTES, Q_BYTES
from .lean_p import HMMA_RULES
from .smem import emit_wait

HALF_256_X2 = 0x5C005C00                    # two halves of 256: B of the half-precision row-sum wgmma
HALF_ONE_X2 = 0x3C003C00                    # two halves of 1: the same B for the exact rule's P values


def stage(prog: Program, c: Cta, block: Reg) -> tuple[Reg, Reg, Reg, Reg]:
    """(K tile, V^T tile, mbarrier, phase parity) of the stage of load number ``block``."""
    emit = prog.emit
    n = c.layout.stages
    stage, phase, k_tile, v_tile, bar = prog.regs("u32", 5)
    emit("and.b32", stage, block, n - 1)
    emit("shr.u32", phase, block, n.bit_length() - 1)
    emit("and.b32", phase, phase, 1)
    emit("mad.lo.u32", k_tile, stage, c.layout.stage_bytes, c.shared.base)
    emit("add.u32", k_tile, k_tile, c.layout.stage0)
    emit("add.u32", v_tile, k_tile, BLOCK_N * c.layout.dqk)
    emit("mad.lo.u32", bar, stage, 8, c.shared.bar0)
    return k_tile, v_tile, bar, phase


def emit_kv_load(prog: Program, c: Cta, block: Reg, slot: Reg | None = None) -> None:
    """Thread 0 (the caller guards): K block ``block`` and its V^T into the stage of load
    number ``slot`` (default: ``block``; specialized.py counts its loads across tiles)."""
    emit = prog.emit
    p, t, zero = c.params, c.tile, c.thread.zero
    k_tile, v_tile, bar, _ = stage(prog, c, block if slot is None else slot)
    key0 = prog.reg("u32")
    emit("mul.lo.u32", key0, block, BLOCK_N)
    emit("mbarrier.expect_tx", bar, c.layout.stage_bytes)
    emit("tma.load.4d", k_tile, p.maps["k_map"], zero, t.kvh, key0, t.b, bar)
    if c.layout.dqk > HEAD_DIM:                            # K columns 128.. by their own map
        tail = prog.reg("u32")
        emit("add.u32", tail, k_tile, KV_BYTES)
        emit("tma.load.4d", tail, p.maps["k_tail_map"], c.thread.col_tail, t.kvh, key0, t.b, bar)
    emit("tma.load.3d", v_tile, p.maps["vt_map"], key0, zero, t.bkv, bar)


def emit_q_load(prog: Program, c: Cta, q_tile: Reg, row: Reg) -> None:
    """Thread 0: the Q tile(s) of 64 rows from ``row`` into ``q_tile`` (mbarrier bar_q)."""
    p, t, bar = c.params, c.tile, c.shared.bar_q
    prog.emit("tma.load.4d", q_tile, p.maps["q_map"], c.thread.zero, t.h, row, t.b, bar)
    if c.layout.dqk > HEAD_DIM:
        tail = prog.reg("u32")
        prog.emit("add.u32", tail, q_tile, Q_BYTES)
        prog.emit("tma.load.4d", tail, p.maps["q_tail_map"], c.thread.col_tail, t.h, row, t.b, bar)


def emit_kv_wait(prog: Program, c: Cta, j: Reg, tag: str) -> None:
    """Spin until key block ``j``'s K and V^T have landed in its stage."""
    _, _, bar, phase = stage(prog, c, j)
    emit_wait(prog, bar, phase, f"WAIT_KV{tag}")


def emit_prefetch(prog: Program, c: Cta, block: Reg) -> None:
    """Thread 0 starts the loads of key block ``block`` if it exists (its stage is free: the
    block that used it last finished before the last bar.sync)."""
    go = prog.reg("pred")
    prog.emit("setp.lt.u32", go, block, c.tile.n_blocks)
    prog.emit("and.pred", go, go, c.thread.leader)
    prog.emit("bra.div", "PREFETCHED", guard=f"!{go}")
    emit_kv_load(prog, c, block)
    prog.label("PREFETCHED")


def emit_setup(prog: Program, c: Cta, rule: str, counts: list[int], writers: Reg | None = None) -> Reg | None:
    """Thread 0 initializes the mbarriers (arrival ``counts``, from Q's on); for a rule with
    half-precision row sums (lean_p.HMMA_RULES) the first 128 threads (``writers``: their predicate, when the CTA has
    more) write the ones tile, B of the row-sum wgmmas; then a CTA-wide barrier. Returns the
    ones tile's shared address (None without it)."""
    emit = prog.emit
    for k, count in enumerate(counts):
        bar = prog.reg("u32")
        emit("add.u32", bar, c.shared.bar_q, 8 * k)
        emit("mbarrier.init", bar, count, guard=c.thread.leader)
    emit("fence.mbarrier_init")
    ones = None
    if rule in HMMA_RULES:
        ones, ones_word, tid8 = prog.regs("u32", 3)
        emit("add.u32", ones, c.shared.base, c.layout.stage0 - ONES_BYTES)
        prog.comment("the ones tile: 128 threads x 8 bytes, visible to wgmma (the async proxy)")
        emit("mov.u32", tid8, "%tid.x")
        emit("mad.lo.u32", tid8, tid8, 8, ones)
        emit("mov.u32", ones_word, HALF_ONE_X2 if rule == "exact" else HALF_256_X2)
        emit("st.shared.v2.b32", tid8, ones_word, ones_word, guard=writers)
        emit("fence.proxy.async")
    emit("bar.sync", 0)
    return ones
