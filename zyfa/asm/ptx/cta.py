"""What a CTA of the generated Hopper kernel knows, as typed records, and the prologue that
sets it up: the kernel parameters, the thread's coordinates, the tile of work and its
key-block bounds, the thread's rows and their factors, and the shared-memory addresses
(for serial.py and specialized.py)."""
from __future__ import annotations

import dataclasses

from ...spec.constants import KEY_BLOCK
from ..program import Program, Reg
from .layout import BLOCK_M, BLOCK_N, COLUMN_TILE, HEAD_DIM, THREADS, Layout
from .target import f32
from .window import Window, emit_block_range, emit_row_window, emit_window_registers


@dataclasses.dataclass(frozen=True)
class Params:
    """The kernel parameters (layout.PARAMS) in registers."""
    maps: dict[str, Reg]    # generic addresses of the TMA maps, by parameter name (tail maps: E4M3 Dqk 192)
    out: Reg                # out (B, Sq, Hq, 128) BF16
    lse: Reg                # lse (B, Hq, Sq) float32
    fac_ptr: Reg            # fac (B, Hkv) float32: the log2-domain score factor c
    vd_ptr: Reg             # v_descale (B, Hkv, 128) float32 (E4M3)
    seqlen_q: Reg
    seqlen_k: Reg
    heads: Reg
    kv_heads: Reg
    batch: Reg
    packed: "PackedParams | None" = None    # a packed batch's per-sequence tables
    tile_order: Reg | None = None           # Layout.tile_counter: the counter, then the tile order
    tile_draws: Reg | None = None           # Layout.tile_counter: the tiles listed
    kfac_ptr: Reg | None = None             # Layout.int8_qk: k's descales a 128-key block (B, Hkv, blocks)


@dataclasses.dataclass(frozen=True)
class PackedParams:
    """layout.PACKED_PARAMS in registers."""
    cu_q: Reg
    k_start: Reg
    k_len: Reg
    v_start: Reg
    lse_head_stride: Reg
    lse_row_scale: Reg


@dataclasses.dataclass(frozen=True)
class Thread:
    """Where the thread sits in its warpgroup (the wgmma fragments' w, g, q), and constants
    that instructions take as registers only."""
    wg: Reg | None          # warpgroup (specialized: 0 producer, 1 and 2 consumers)
    warp: Reg               # warp within the warpgroup
    g: Reg                  # quad row: the thread holds accumulator rows g and g + 8
    q: Reg                  # quad column: the thread holds columns 2q, 2q + 1 of each 8
    lane0: Reg | None       # specialized: lane 0 of its warp (arrives on mbarriers for the warp)
    leader: Reg             # thread 0 of the CTA: initializes mbarriers and issues TMA loads
    zero: Reg               # 0: TMA coordinates are registers
    col_tail: Reg           # 128: the first column of the Q / K tail tiles (Dqk 192)


@dataclasses.dataclass(frozen=True)
class Tile:
    """The CTA's tile of work (registers the prologue or, per tile, tile_loop.py writes) and
    the kernel-wide key bounds it is cut by."""
    causal: bool
    group: Reg              # heads / kv_heads (GQA)
    diag: Reg               # seqlen_k - seqlen_q: row i sees keys <= i + diag (bottom-right)
    full_end: Reg           # seqlen_k rounded down to a block: keys from it on are masked
    last_key: Reg           # seqlen_k - 1
    b: Reg                  # batch
    h: Reg                  # head
    kvh: Reg                # its kv head
    bkv: Reg                # b * kv_heads + kvh
    tile_m: Reg             # the CTA's first query row
    start_m: Reg            # the warpgroup's first query row (serial: tile_m)
    n_blocks: Reg           # key blocks [0, n_blocks) hold keys some row of the CTA sees (window: from first_block)
    block_n: int = BLOCK_N  # keys a block (layout.block_n)
    seq: "SequenceRows | None" = None   # a packed batch: where the tile's sequence lies
    window: Window | None = None        # Layout.window: its bounds and the tile's first block


@dataclasses.dataclass(frozen=True)
class SequenceRows:
    """A packed batch's tile: its sequence's rows in the packed tensors (emit_work writes them)."""
    q_len: Reg              # the sequence's queries (rows past it are skipped)
    k_len: Reg
    q_row0: Reg             # its first row in q, out and the LSE's rows
    k_row0: Reg             # its first key in k (and 16-bit v)
    v_row0: Reg             # its first key in FP8 V^T
    empty: Reg              # pred: the tile starts past the sequence's queries


@dataclasses.dataclass(frozen=True)
class Rows:
    """The thread's two rows (g and g + 8 of its warp) and what only computing warpgroups need."""
    rows: list[Reg]         # query rows
    limits: list[Reg]       # their last visible keys
    band_start: Reg         # the warpgroup's first block that needs the mask
    fac: Reg                # c: t = S * c is the log2-domain score (made > 0 by emit_positive_factor)
    vd_base: Reg            # &v_descale[b, kvh, 2q]
    row_fac: list[Reg] | None = None   # int8_qk: the two rows' factors (fac is then unused)
    kfac_base: Reg | None = None       # int8_qk: &kfac[b, kvh, 0], one float a key block
    first: Reg | None = None           # window: the first key row g sees (signed; row g + 8: 8 more)
    left_end: Reg | None = None        # window: the warpgroup's first key past its masked left band


@dataclasses.dataclass(frozen=True)
class Shared:
    """Shared-memory addresses (layout.Layout says what lies where)."""
    base: Reg               # the dynamic shared memory, aligned to 1024: the first Q tile
    bar_q: Reg              # mbarrier: the Q tiles have landed
    bar0: Reg               # mbarrier of stage 0 (one a stage, 8 bytes apart): K / V^T landed
    free0: Reg | None       # specialized: the "stage free" mbarrier of stage 0, then Q free
    v_full0: Reg | None = None   # split_kv: V landed (stage 0's; one a stage), then V free (v_free0)
    v_free0: Reg | None = None


@dataclasses.dataclass(frozen=True)
class Cta:
    """Everything a schedule's block step, loads and epilogue read."""
    layout: Layout
    params: Params
    thread: Thread
    tile: Tile
    shared: Shared
    accumulate: Reg         # true: wgmma's scale-d operand (add to the accumulator)


def emit_prologue(prog: Program, causal: bool, layout: Layout) -> tuple[Cta, Rows | None]:
    """Parameters, thread coordinates, the tile's registers and shared-memory addresses. The
    serial kernel's one tile comes from the grid, and its rows with it (returned); the
    specialized kernel's consumers take tiles in a loop (emit_work, emit_rows per tile)."""
    params = emit_params(prog, layout)
    thread = emit_thread(prog, layout)
    tile = emit_tile_registers(prog, params, causal, layout)
    rows = None
    if not layout.specialized:
        prog.comment("work: query tile from ctaid.x (last tiles first), (batch, head) from ctaid.y: the CTAs")
        prog.comment("running together share one head's K/V, which then stays in L2 (heads fastest thrashed it)")
        bh, ty, nty = prog.regs("u32", 3)
        prog.emit("mov.u32", bh, "%ctaid.y")
        prog.emit("mov.u32", ty, "%ctaid.x")
        prog.emit("mov.u32", nty, "%nctaid.x")
        prog.emit("sub.u32", ty, nty, ty)
        prog.emit("sub.u32", ty, ty, 1)
        emit_work(prog, params, thread, tile, layout, ty, bh)
        if layout.packed:                      # a tile past its sequence's queries: nothing to do
            prog.emit("ret", guard=tile.seq.empty)
        rows = emit_rows(prog, params, thread, tile, layout.dv)
    shared = emit_shared(prog, layout)
    yes = prog.reg("pred")                     # true: wgmma's scale-d operand "add to the accumulator"
    prog.emit("setp.eq.u32", yes, thread.zero, 0)
    return Cta(layout, params, thread, tile, shared, yes), rows


def emit_params(prog: Program, layout: Layout) -> Params:
    emit = prog.emit
    tmp64 = prog.reg("u64")
    maps = {}
    tails = any(width != COLUMN_TILE for _, width in layout.qk_tiles)
    for name in ("q_map", "k_map", "v_map") + (("q_tail_map", "k_tail_map") if tails else ()):
        maps[name] = prog.reg("u64")
        emit("mov.b64", tmp64, name)
        emit("cvta.param.u64", maps[name], tmp64)
    pointers = prog.regs("u64", 4)
    for r, name in zip(pointers, ("out_ptr", "lse_ptr", "fac_ptr", "vd_ptr")):
        emit("ld.param.u64", r, name)
    sizes = prog.regs("u32", 5)
    for r, name in zip(sizes, ("seqlen_q", "seqlen_k", "heads", "kv_heads", "batch")):
        emit("ld.param.u32", r, name)
    packed = None
    if layout.packed:
        tables, lse_layout = prog.regs("u64", 4), prog.regs("u32", 2)
        for r, name in zip(tables, ("cu_q_ptr", "k_start_ptr", "k_len_ptr", "v_start_ptr")):
            emit("ld.param.u64", r, name)
        for r, name in zip(lse_layout, ("lse_head_stride", "lse_row_scale")):
            emit("ld.param.u32", r, name)
        packed = PackedParams(*tables, *lse_layout)
    order = draws = kfac = None
    if layout.tile_counter:
        order, draws = prog.reg("u64"), prog.reg("u32")
        emit("ld.param.u64", order, "tile_order_ptr")
        emit("ld.param.u32", draws, "tile_draws")
    if layout.int8_qk:
        kfac = prog.reg("u64")
        emit("ld.param.u64", kfac, "kfac_ptr")
    return Params(maps, *pointers, *sizes, packed, order, draws, kfac)


def emit_thread(prog: Program, layout: Layout) -> Thread:
    emit = prog.emit
    prog.comment("thread coordinates: warp w, quad row g, quad column q")
    tid, warp, lane, g = prog.regs("u32", 4)
    q = prog.reg("u32")
    emit("mov.u32", tid, "%tid.x")
    raw_tid, wg, lane0 = tid, None, None
    if layout.specialized:
        tid, wg = prog.regs("u32", 2)
        emit("and.b32", tid, raw_tid, THREADS - 1)
        emit("shr.u32", wg, raw_tid, 7)
        # the same in every lane, which ptxas sees only through a shuffle from lane 0: values
        # built from it (Q's tile, its wgmma descriptors) then stay in uniform registers
        emit("shfl.idx0", wg, wg)
    emit("shr.u32", warp, tid, 5)
    emit("and.b32", lane, raw_tid, 31)
    emit("shr.u32", g, lane, 2)
    emit("and.b32", q, lane, 3)
    if layout.specialized:
        lane0 = prog.reg("pred")
        emit("setp.eq.u32", lane0, lane, 0)
    leader = prog.reg("pred")
    emit("setp.eq.u32", leader, raw_tid, 0)
    zero, col_tail = prog.regs("u32", 2)
    emit("mov.u32", zero, 0)
    emit("mov.u32", col_tail, HEAD_DIM)
    return Thread(wg, warp, g, q, lane0, leader, zero, col_tail)


def emit_round_down(prog: Program, dst: Reg, x: Reg, block_n: int) -> None:
    """dst = x rounded down to a multiple of block_n (a mask for a power of two)."""
    if block_n & (block_n - 1) == 0:
        prog.emit("and.b32", dst, x, -block_n & 0xFFFFFFFF)
        return
    rem = prog.reg("u32")
    prog.emit("rem.u32", rem, x, block_n)
    prog.emit("sub.u32", dst, x, rem)


def emit_block_count(prog: Program, dst: Reg, x: Reg, block_n: int) -> None:
    """dst = ceil(x / block_n) (a shift for a power of two; else ptxas's multiply-high)."""
    prog.emit("add.u32", dst, x, block_n - 1)
    if block_n & (block_n - 1) == 0:
        prog.emit("shr.u32", dst, dst, block_n.bit_length() - 1)
    else:
        prog.emit("div.u32", dst, dst, block_n)


def emit_tile_registers(prog: Program, p: Params, causal: bool, layout: Layout) -> Tile:
    """The key bounds, and the registers of the tile (written by emit_work)."""
    emit = prog.emit
    group, diag, full_end, last_key = prog.regs("u32", 4)
    emit("div.u32", group, p.heads, p.kv_heads)
    if not layout.packed:                              # a packed batch's: per tile (emit_work)
        emit("sub.u32", diag, p.seqlen_k, p.seqlen_q)
        emit_round_down(prog, full_end, p.seqlen_k, layout.block_n)
        emit("sub.u32", last_key, p.seqlen_k, 1)
    b, h, kvh, bkv, tile_m, n_blocks = prog.regs("u32", 6)
    start_m = prog.reg("u32") if layout.specialized else tile_m
    seq = SequenceRows(*prog.regs("u32", 5), prog.reg("pred")) if layout.packed else None
    return Tile(causal, group, diag, full_end, last_key, b, h, kvh, bkv, tile_m, start_m, n_blocks, layout.block_n,
                seq, emit_window_registers(prog, layout))


def emit_work(prog: Program, p: Params, thread: Thread, tile: Tile, layout: Layout, m_tile: Reg, bh: Reg) -> None:
    """The CTA's tile: query rows from tile ``m_tile`` of (batch, head) ``bh`` (= b * heads +
    h); its kv head; key blocks [0, n_blocks) of the CTA's rows."""
    emit = prog.emit
    t = tile
    cta_rows = BLOCK_M * layout.consumers
    emit("div.u32", t.b, bh, p.heads)
    emit("rem.u32", t.h, bh, p.heads)
    emit("div.u32", t.kvh, t.h, t.group)
    emit("mad.lo.u32", t.bkv, t.b, p.kv_heads, t.kvh)
    emit("mul.lo.u32", t.tile_m, m_tile, cta_rows)
    if layout.specialized:                                 # consumer wg's rows: 64 (wg - 1) on
        emit("mad.lo.u32", t.start_m, thread.wg, BLOCK_M, t.tile_m)
        emit("sub.u32", t.start_m, t.start_m, BLOCK_M)
    seqlen_k = p.seqlen_k
    if layout.packed:
        seqlen_k = _emit_sequence(prog, p, t)
    if t.window is not None:
        return emit_block_range(prog, t, seqlen_k, cta_rows)
    band_end = prog.reg("u32")
    if t.causal:
        emit("add.u32", band_end, t.tile_m, cta_rows)
        emit("add.u32", band_end, band_end, t.diag)
        emit("min.u32", band_end, band_end, seqlen_k)
    else:
        emit("mov.u32", band_end, seqlen_k)
    emit_block_count(prog, t.n_blocks, band_end, layout.block_n)


def _emit_sequence(prog: Program, p: Params, t: Tile) -> Reg:
    """A packed batch: the tile's sequence (batch index t.b) from the tables, its key bounds,
    and whether the tile is past its queries. Returns its key count."""
    emit, seq, pk = prog.emit, t.seq, p.packed
    off, addr = prog.regs("u64", 2)
    next_row = prog.reg("u32")
    emit("mul.wide.u32", off, t.b, 4)
    for table, dst in ((pk.cu_q, seq.q_row0), (pk.k_start, seq.k_row0), (pk.k_len, seq.k_len),
                       (pk.v_start, seq.v_row0)):
        emit("add.u64", addr, table, off)
        emit("ld.global.u32", dst, addr)
    emit("add.u64", addr, pk.cu_q, off)
    emit("add.u64", addr, addr, 4)
    emit("ld.global.u32", next_row, addr)
    emit("sub.u32", seq.q_len, next_row, seq.q_row0)
    emit("setp.ge.u32", seq.empty, t.tile_m, seq.q_len)
    emit("sub.u32", t.diag, seq.k_len, seq.q_len)
    emit_round_down(prog, t.full_end, seq.k_len, t.block_n)
    emit("sub.u32", t.last_key, seq.k_len, 1)
    return seq.k_len


def emit_rows(prog: Program, p: Params, thread: Thread, tile: Tile, dv: int) -> Rows:
    """The thread's rows, their last visible keys, the warpgroup's first masked block and its
    head's factors (FP8: and where its kv head's ``dv`` v descales start)."""
    emit = prog.emit
    t = tile
    prog.comment("block bounds: keys [0, band_start) unmasked, [band_start, band_end) masked")
    band_start = prog.reg("u32")
    rows, limits = prog.regs("u32", 2), prog.regs("u32", 2)
    emit("mad.lo.u32", rows[0], thread.warp, 16, thread.g)
    emit("add.u32", rows[0], rows[0], t.start_m)
    emit("add.u32", rows[1], rows[0], 8)
    if t.causal and t.window is None:
        emit("add.u32", band_start, t.start_m, t.diag)
        emit("add.u32", band_start, band_start, 1)
        emit_round_down(prog, band_start, band_start, t.block_n)
        emit("min.u32", band_start, band_start, t.full_end)
        for row, lim in zip(rows, limits):
            emit("add.u32", lim, row, t.diag)
            emit("min.u32", lim, lim, t.last_key)
    elif t.window is None:
        emit("mov.u32", band_start, t.full_end)
        for lim in limits:
            emit("mov.u32", lim, t.last_key)

    prog.comment("per-head factors: t = S * fac (log2 domain); v descales for the epilogue")
    off, addr = prog.regs("u64", 2)
    fac = prog.reg("f32")
    emit("mul.wide.u32", off, t.bkv, 4)
    emit("add.u64", addr, p.fac_ptr, off)
    row_fac = kfac_base = None
    if p.kfac_ptr is None:
        emit("ld.global.f32", fac, addr)
    else:
        row_fac, kfac_base = _emit_int8_factors(prog, p, t, rows)
    col_idx = prog.reg("u32")
    emit("mad.lo.u32", col_idx, t.bkv, dv, thread.q)
    emit("add.u32", col_idx, col_idx, thread.q)            # bkv * Dv + 2q
    vd_base = prog.reg("u64")
    emit("mul.wide.u32", off, col_idx, 4)
    emit("add.u64", vd_base, p.vd_ptr, off)
    first, left_end = emit_row_window(prog, t, rows, limits, band_start, kfac_base)   # (None, None) without
    return Rows(rows, limits, band_start, fac, vd_base, row_fac, kfac_base, first, left_end)


def _emit_int8_factors(prog: Program, p: Params, t: Tile, rows: list[Reg]) -> tuple[list[Reg], Reg]:
    """int8_qk: the two rows' factors from fac_ptr (B, Hq, Sq), 0 past seqlen_q, and where the
    kv head's block descales start in kfac_ptr (B, Hkv, ceil(Sk / 128))."""
    emit = prog.emit
    row_fac = prog.regs("f32", 2)
    first, idx, blocks = prog.regs("u32", 3)
    off, addr = prog.regs("u64", 2)
    emit("mad.lo.u32", first, t.b, p.heads, t.h)
    emit("mul.lo.u32", first, first, p.seqlen_q)             # (b * Hq + h) * Sq
    for row, fac in zip(rows, row_fac):
        inside = prog.reg("pred")
        emit("setp.lt.u32", inside, row, p.seqlen_q)
        emit("mov.f32", fac, f32(0.0))
        emit("add.u32", idx, first, row)
        emit("mul.wide.u32", off, idx, 4)
        emit("add.u64", addr, p.fac_ptr, off)
        emit("ld.global.f32", fac, addr, guard=inside)
    emit("add.u32", blocks, p.seqlen_k, KEY_BLOCK - 1)             # k's descales: one a spec key block
    emit("shr.u32", blocks, blocks, KEY_BLOCK.bit_length() - 1)
    emit("mul.lo.u32", idx, t.bkv, blocks)
    kfac_base = prog.reg("u64")
    emit("mul.wide.u32", off, idx, 4)
    emit("add.u64", kfac_base, p.kfac_ptr, off)
    return row_fac, kfac_base


def emit_shared(prog: Program, layout: Layout) -> Shared:
    emit = prog.emit
    prog.comment("shared memory: Q | ones | stages of K, V^T | mbarriers (base aligned to 1024)")
    raw = prog.reg("u32")
    base, bar_q, bar0 = prog.regs("u32", 3)
    emit("mov.u32", raw, "zyfa_smem")
    emit("add.u32", raw, raw, 1023)
    emit("and.b32", base, raw, -1024 & 0xFFFFFFFF)
    emit("add.u32", bar_q, base, layout.bar_offset)
    emit("add.u32", bar0, bar_q, 8)
    free0 = v_full0 = v_free0 = None
    if layout.specialized:
        free0 = prog.reg("u32")
        emit("add.u32", free0, bar0, 8 * layout.stages)
    if layout.split_kv:
        v_full0, v_free0 = prog.regs("u32", 2)
        emit("add.u32", v_full0, free0, 8 * (layout.stages + 1))
        emit("add.u32", v_free0, v_full0, 8 * layout.stages)
    return Shared(base, bar_q, bar0, free0, v_full0, v_free0)

