"""The CTA's mbarriers and TMA loads in the generated Hopper kernel: the ring of K / V^T (16-bit: V)
stages (which stage, buffer and mbarrier phase a key block uses), the loads of Q and of a
key block, and the setup of the mbarriers and the ones tile."""
from __future__ import annotations

from ..program import Program, Reg
from .cta import Cta
from .layout import BLOCK_M, COLUMN_TILE, HEAD_DIM
from .lean_p import HMMA_RULES, thread_row_sums
from .smem import emit_wait

HALF_256_X2 = 0x5C005C00                    # two halves of 256: B of the half-precision row-sum wgmma
HALF_ONE_X2 = 0x3C003C00                    # two halves of 1: the same B for the exact rule's P values


def stage(prog: Program, c: Cta, block: Reg) -> tuple[Reg, Reg, Reg, Reg]:
    """(K tile, V^T / V tile, mbarrier, phase parity) of the stage of load number ``block``."""
    emit = prog.emit
    k_tile, v_tile, bar = prog.regs("u32", 3)
    stage, phase = emit_ring_position(prog, c.layout.stages, block)
    emit("and.b32", phase, phase, 1)
    emit("mad.lo.u32", k_tile, stage, c.layout.stage_bytes, c.shared.base)
    emit("add.u32", k_tile, k_tile, c.layout.stage0)
    emit("add.u32", v_tile, k_tile, c.layout.k_bytes)
    emit("mad.lo.u32", bar, stage, 8, c.shared.bar0)
    return k_tile, v_tile, bar, phase


def emit_ring_position(prog: Program, stages: int, n: Reg) -> tuple[Reg, Reg]:
    """(stage, round) of use number ``n`` of a ring of ``stages`` buffers: n mod stages and
    n / stages (shift and mask for a power of two)."""
    stage, rounds = prog.regs("u32", 2)
    magic = _division_magic(stages)
    if stages & (stages - 1) == 0:
        prog.emit("and.b32", stage, n, stages - 1)
        prog.emit("shr.u32", rounds, n, stages.bit_length() - 1)
    elif magic:                       # n / stages as a multiply-high: no division loop, no MUFU.RCP
        prog.emit("mul.hi.u32", rounds, n, magic[0])
        prog.emit("shr.u32", rounds, rounds, magic[1])
        prog.emit("mul.lo.u32", stage, rounds, stages)
        prog.emit("sub.u32", stage, n, stage)
    else:
        prog.emit("rem.u32", stage, n, stages)
        prog.emit("div.u32", rounds, n, stages)
    return stage, rounds


def _division_magic(d: int) -> tuple[int, int] | None:
    """(m, s) with n // d == (n * m) >> (32 + s) for every 32-bit n (m < 2^32), if any: the
    rounding error m d - 2^(32 + s) must stay within 2^s."""
    for s in range(32):
        m = -(-(1 << (32 + s)) // d)
        if m < (1 << 32) and m * d - (1 << (32 + s)) <= (1 << s):
            return m, s
    return None


def _column(prog: Program, c: Cta, col: int) -> Reg:
    """A register holding the byte column ``col`` (TMA coordinates are registers)."""
    if col == 0:
        return c.thread.zero
    if col == HEAD_DIM:
        return c.thread.col_tail
    reg = prog.reg("u32")
    prog.emit("mov.u32", reg, col)
    return reg


def _emit_rows_load(prog: Program, c: Cta, tile: Reg | None, rows: int, maps: tuple[str, str], tiles, head: Reg,
                    row: Reg, bar: Reg | None, row0: Reg | None = None) -> None:
    """TMA loads of ``rows`` rows from ``row`` of (batch, ``head``), column tile by column tile
    (``maps``: the map of 128-byte tiles, of 64-byte ones), each tile's rows contiguous at ``tile``.
    A packed batch (its tensors are batch 1): from row ``row0`` + ``row``. ``tile`` None: the
    same boxes prefetched into L2."""
    batch = c.tile.b
    if c.layout.packed:
        packed_row = prog.reg("u32")
        prog.emit("add.u32", packed_row, row0, row)
        row, batch = packed_row, c.thread.zero
    for col, width in tiles:
        m = c.params.maps[maps[0] if width == COLUMN_TILE else maps[1]]
        if tile is None:
            prog.emit("tma.prefetch.4d", m, _column(prog, c, col), head, row, batch)
            continue
        dst = tile
        if col:
            dst = prog.reg("u32")
            prog.emit("add.u32", dst, tile, rows * col)
        prog.emit("tma.load.4d", dst, m, _column(prog, c, col), head, row, batch, bar)


def emit_kv_load(prog: Program, c: Cta, block: Reg, slot: Reg | None = None) -> None:
    """Thread 0 (the caller guards): K block ``block`` and its V^T (16-bit: V) into the stage of
    load number ``slot`` (default: ``block``; specialized.py counts its loads across tiles)."""
    k_tile, v_tile, bar, _ = stage(prog, c, block if slot is None else slot)
    key0 = emit_first_key(prog, c, block)
    prog.emit("mbarrier.expect_tx", bar, c.layout.stage_bytes)
    emit_k_rows(prog, c, k_tile, key0, bar)
    emit_v_rows(prog, c, v_tile, key0, bar)


def emit_first_key(prog: Program, c: Cta, block: Reg) -> Reg:
    """The first key of the tile's block ``block`` (a window: counted from the tile's first)."""
    key0 = prog.reg("u32")
    if c.tile.window is not None:
        prog.emit("add.u32", key0, block, c.tile.window.first_block)
        prog.emit("mul.lo.u32", key0, key0, c.layout.block_n)
        return key0
    prog.emit("mul.lo.u32", key0, block, c.layout.block_n)
    return key0


def emit_k_rows(prog: Program, c: Cta, k_tile: Reg, key0: Reg, bar: Reg) -> None:
    """The TMA loads of a K block from key ``key0`` into ``k_tile``, completing on ``bar``."""
    if c.layout.slot_keys:
        return _emit_slot_k_rows(prog, c, k_tile, key0, bar)
    _emit_rows_load(prog, c, k_tile, c.layout.block_n, ("k_map", "k_tail_map"), c.layout.qk_tiles, c.tile.kvh, key0,
                    bar, c.tile.seq and c.tile.seq.k_row0)


def _emit_slot_k_rows(prog: Program, c: Cta, k_tile: Reg, key0: Reg, bar: Reg) -> None:
    """K's rows in P's slot order (Layout.slot_keys): the map's dims, innermost first, are a
    key's row of bytes (all kv heads), e, q, h and the 16-key group of the flattened batch
    (zyfa.spec.key_order.slot_order_rows), so the box lands row 8h + 2q + e of each group from key
    4q + 2h + e. Coordinates: (kv head x Dqk + column, 0, 0, 0, (b x seqlen_k + key0) / 16)."""
    emit = prog.emit
    layout, t, zero = c.layout, c.tile, c.thread.zero
    group, head_col = prog.regs("u32", 2)
    emit("mad.lo.u32", group, t.b, c.params.seqlen_k, key0)
    emit("shr.u32", group, group, 4)
    emit("mul.lo.u32", head_col, t.kvh, layout.dqk)
    for col, width in layout.qk_tiles:
        m = c.params.maps["k_map" if width == COLUMN_TILE else "k_tail_map"]
        dst, x = k_tile, head_col
        if col:
            dst, x = prog.regs("u32", 2)
            emit("add.u32", dst, k_tile, layout.block_n * col)
            emit("add.u32", x, head_col, col)
        emit("tma.load.5d", dst, m, x, zero, zero, zero, group, bar)


def emit_v_rows(prog: Program, c: Cta, v_tile: Reg, key0: Reg, bar: Reg) -> None:
    """The TMA load(s) of the block's V^T (16-bit: V) from key ``key0`` into ``v_tile``."""
    emit = prog.emit
    t, layout = c.tile, c.layout
    seq = t.seq
    if layout.is_fp8:
        if layout.packed:                                  # V^T (Hkv, Dv, keys): the sequence's from v_row0
            vkey = prog.reg("u32")
            emit("add.u32", vkey, seq.v_row0, key0)
            emit("tma.load.3d", v_tile, c.params.maps["v_map"], vkey, c.thread.zero, t.kvh, bar)
        else:
            emit("tma.load.3d", v_tile, c.params.maps["v_map"], key0, c.thread.zero, t.bkv, bar)
            for box in range(1, layout.v_boxes):            # a wide block's next 128 keys
                box_tile, box_key = prog.regs("u32", 2)
                emit("add.u32", box_tile, v_tile, box * COLUMN_TILE * layout.dv)
                emit("add.u32", box_key, key0, box * COLUMN_TILE)
                emit("tma.load.3d", box_tile, c.params.maps["v_map"], box_key, c.thread.zero, t.bkv, bar)
    else:
        _emit_rows_load(prog, c, v_tile, layout.block_n, ("v_map", None), layout.v_tiles, t.kvh, key0, bar,
                        seq and seq.k_row0)


def emit_q_load(prog: Program, c: Cta, q_tile: Reg | None, row: Reg) -> None:
    """Thread 0: the Q tile(s) of 64 rows from ``row`` into ``q_tile`` (mbarrier bar_q), or
    (``q_tile`` None) into L2 only."""
    _emit_rows_load(prog, c, q_tile, BLOCK_M, ("q_map", "q_tail_map"), c.layout.qk_tiles, c.tile.h, row,
                    None if q_tile is None else c.shared.bar_q, c.tile.seq and c.tile.seq.q_row0)


def emit_kv_wait(prog: Program, c: Cta, j: Reg, tag: str) -> None:
    """Spin until key block ``j``'s K and V^T have landed in its stage."""
    _, _, bar, phase = stage(prog, c, j)
    emit_wait(prog, bar, phase, f"WAIT_KV{tag}")


def emit_prefetch(prog: Program, c: Cta, block: Reg, tag: str = "") -> None:
    """Thread 0 starts the loads of key block ``block`` if it exists (its stage is free: the
    block that used it last finished before the last bar.sync)."""
    go = prog.reg("pred")
    prog.emit("setp.lt.u32", go, block, c.tile.n_blocks)
    prog.emit("and.pred", go, go, c.thread.leader)
    prog.emit("bra.div", f"PREFETCHED{tag}", guard=f"!{go}")
    emit_kv_load(prog, c, block)
    prog.label(f"PREFETCHED{tag}")


def emit_setup(prog: Program, c: Cta, rule: str, counts: list[int], writers: Reg | None = None,
               running: bool = False) -> Reg | None:
    """Thread 0 initializes the mbarriers (arrival ``counts``, from Q's on); for a rule with
    half-precision row sums (lean_p.HMMA_RULES, but for thread_row_sums) the first 128 threads (``writers``: their predicate, when the CTA has
    more) write the ones tile, B of the row-sum wgmmas; then a CTA-wide barrier. Returns the
    ones tile's shared address (None without it)."""
    emit = prog.emit
    for k, count in enumerate(counts):
        bar = prog.reg("u32")
        emit("add.u32", bar, c.shared.bar_q, 8 * k)
        emit("mbarrier.init", bar, count, guard=c.thread.leader)
    emit("fence.mbarrier_init")
    ones = None
    if c.layout.is_fp8 and rule in HMMA_RULES and not thread_row_sums(rule, running):
        ones, ones_word, tid8 = prog.regs("u32", 3)
        emit("add.u32", ones, c.shared.base, c.layout.stage0 - c.layout.ones_bytes)
        prog.comment("the ones tile: 128 threads x 8 bytes, visible to wgmma (the async proxy)")
        emit("mov.u32", tid8, "%tid.x")
        emit("mad.lo.u32", tid8, tid8, 8, ones)
        emit("mov.u32", ones_word, HALF_ONE_X2 if rule == "exact" else HALF_256_X2)
        emit("st.shared.v2.b32", tid8, ones_word, ones_word, guard=writers)
        emit("fence.proxy.async")
    emit("bar.sync", 0)
    return ones
