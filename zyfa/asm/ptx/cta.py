"""One CTA's setup, loads and stores in the generated Hopper kernel: parameters and thread
coordinates, the tile of work and its key-block bounds, TMA loads of Q and of the K / V^T
stages, Q K^T, the mbarriers and the ones tile, and the epilogue. Shared by every schedule
(attention.py's one-warpgroup kernels and pingpong.py)."""
from __future__ import annotations

from ...spec.constants import LN2, P_OFFSET_LOG2
from ..program import Program, Reg
from .layout import (
    ACC,
    BLOCK_M,
    BLOCK_N,
    HEAD_DIM,
    KV_BYTES,
    ONES_BYTES,
    Q_BYTES,
    TAIL,
    THREADS,
    bar_offset,
    stage0,
    stage_bytes,
)
from .smem import emit_descriptor, emit_wait
from .target import f32

E4M3_ONE_X4 = 0x38383838
HALF_256_X2 = 0x5C005C00                    # two halves of 256: B of the half-precision row-sum wgmma
HALF_ONE_X2 = 0x3C003C00                    # two halves of 1: the same B for the exact rule's P values


class Ctx:
    """Registers the prologue sets up and the loop and epilogue read."""


def prologue(prog: Program, causal: bool, n_stages: int, n_consumers: int = 1, dqk: int = HEAD_DIM) -> Ctx:
    """Parameters, thread coordinates, and (one warpgroup a CTA) the CTA's tile and block bounds. With
    ``n_consumers`` > 1 the CTA has a producer warpgroup (c.wg 0) and consumer warpgroups
    1.., each of 64 query rows; thread coordinates are within the warpgroup and the key
    blocks span the CTA's rows."""
    c = Ctx()
    c.stages, c.stage0, c.dqk = n_stages, stage0(n_consumers, dqk), dqk
    c.q_bytes = BLOCK_M * dqk                              # one consumer's Q tiles
    emit = prog.emit
    tmp64 = prog.reg("u64")
    c.maps = {}
    for name in ("q_map", "k_map", "vt_map") + (("q_tail_map", "k_tail_map") if dqk > HEAD_DIM else ()):
        r = prog.reg("u64")
        emit("mov.b64", tmp64, name)
        emit("cvta.param.u64", r, tmp64)
        c.maps[name] = r
    c.out, c.lse, fac_ptr, vd_ptr = prog.regs("u64", 4)
    for r, name in ((c.out, "out_ptr"), (c.lse, "lse_ptr"), (fac_ptr, "fac_ptr"), (vd_ptr, "vd_ptr")):
        emit("ld.param.u64", r, name)
    c.sq, c.sk, c.hq, hkv, c.batch = prog.regs("u32", 5)
    for r, name in ((c.sq, "seqlen_q"), (c.sk, "seqlen_k"), (c.hq, "heads"), (hkv, "kv_heads"), (c.batch, "batch")):
        emit("ld.param.u32", r, name)

    prog.comment("thread coordinates: warp w, quad row g, quad column q")
    tid, warp, lane, g = prog.regs("u32", 4)
    c.q = prog.reg("u32")
    emit("mov.u32", tid, "%tid.x")
    c.tid = tid
    if n_consumers > 1:
        c.tid, c.wg = prog.regs("u32", 2)
        emit("and.b32", c.tid, tid, THREADS - 1)
        emit("shr.u32", c.wg, tid, 7)
    emit("shr.u32", warp, c.tid, 5)
    emit("and.b32", lane, tid, 31)
    emit("shr.u32", g, lane, 2)
    emit("and.b32", c.q, lane, 3)
    if n_consumers > 1:
        c.lane0 = prog.reg("pred")
        emit("setp.eq.u32", c.lane0, lane, 0)
    c.leader = prog.reg("pred")
    emit("setp.eq.u32", c.leader, tid, 0)
    c.zero = prog.reg("u32")                               # TMA coordinates must be registers
    emit("mov.u32", c.zero, 0)
    c.col_tail = prog.reg("u32")                           # first column of the Q / K tail tiles
    emit("mov.u32", c.col_tail, HEAD_DIM)

    c.hkv, c.causal, c.n_consumers = hkv, causal, n_consumers
    c.group = prog.reg("u32")
    emit("div.u32", c.group, c.hq, hkv)
    c.diag, c.full_end, c.last_key = prog.regs("u32", 3)
    emit("sub.u32", c.diag, c.sk, c.sq)                    # bottom-right: row i sees keys <= i + diag
    emit("and.b32", c.full_end, c.sk, -BLOCK_N & 0xFFFFFFFF)
    emit("sub.u32", c.last_key, c.sk, 1)
    c.b, c.h, c.kvh, c.bkv, c.tile_m, c.n_blocks = prog.regs("u32", 6)
    c.start_m = prog.reg("u32") if n_consumers > 1 else c.tile_m
    c.warp, c.g, c.fac_ptr, c.vd_ptr = warp, g, fac_ptr, vd_ptr
    if n_consumers == 1:                # the warp-specialized kernels take tiles in a loop (pingpong.py)
        prog.comment("work: query tile from ctaid.x (last tiles first), (batch, head) from ctaid.y: the CTAs")
        prog.comment("running together share one head's K/V, which then stays in L2 (heads fastest thrashed it)")
        bh, ty, nty = prog.regs("u32", 3)
        emit("mov.u32", bh, "%ctaid.y")
        emit("mov.u32", ty, "%ctaid.x")
        emit("mov.u32", nty, "%nctaid.x")
        emit("sub.u32", ty, nty, ty)
        emit("sub.u32", ty, ty, 1)
        emit_work(prog, c, ty, bh)
        emit_rows(prog, c, causal)

    prog.comment("shared memory: Q | stage 0 K, V^T | stage 1 K, V^T | mbarriers (base aligned to 1024)")
    raw = prog.reg("u32")
    c.smem, c.bar_q, c.bar0 = prog.regs("u32", 3)
    emit("mov.u32", raw, "zyfa_smem")
    emit("add.u32", raw, raw, 1023)
    emit("and.b32", c.smem, raw, -1024 & 0xFFFFFFFF)
    emit("add.u32", c.bar_q, c.smem, bar_offset(n_stages, n_consumers, dqk))
    emit("add.u32", c.bar0, c.bar_q, 8)
    if n_consumers > 1:
        c.empty0 = prog.reg("u32")
        emit("add.u32", c.empty0, c.bar0, 8 * n_stages)
    return c


def emit_work(prog: Program, c: Ctx, m_tile: Reg, bh: Reg) -> None:
    """The CTA's tile: query rows from tile ``m_tile`` of (batch, head) ``bh`` (= b * heads +
    h); its kv head; key blocks [0, n_blocks) of the CTA's rows."""
    emit = prog.emit
    emit("div.u32", c.b, bh, c.hq)
    emit("rem.u32", c.h, bh, c.hq)
    emit("div.u32", c.kvh, c.h, c.group)
    emit("mad.lo.u32", c.bkv, c.b, c.hkv, c.kvh)
    emit("mul.lo.u32", c.tile_m, m_tile, BLOCK_M * c.n_consumers)
    if c.n_consumers > 1:                                  # consumer wg's rows: 64 (wg - 1) on
        emit("mad.lo.u32", c.start_m, c.wg, BLOCK_M, c.tile_m)
        emit("sub.u32", c.start_m, c.start_m, BLOCK_M)
    band_end = prog.reg("u32")
    if c.causal:
        emit("add.u32", band_end, c.tile_m, BLOCK_M * c.n_consumers)
        emit("add.u32", band_end, band_end, c.diag)
        emit("min.u32", band_end, band_end, c.sk)
    else:
        emit("mov.u32", band_end, c.sk)
    emit("add.u32", c.n_blocks, band_end, BLOCK_N - 1)
    emit("shr.u32", c.n_blocks, c.n_blocks, 7)


def emit_rows(prog: Program, c: Ctx, causal: bool) -> None:
    """The thread's rows, their last visible keys, the warpgroup's first masked block
    (band_start) and its head's factors: what only the computing warpgroups need."""
    emit = prog.emit
    prog.comment("block bounds: keys [0, band_start) unmasked, [band_start, band_end) masked")
    c.band_start = prog.reg("u32")
    c.rows, c.limits = prog.regs("u32", 2), prog.regs("u32", 2)
    emit("mad.lo.u32", c.rows[0], c.warp, 16, c.g)
    emit("add.u32", c.rows[0], c.rows[0], c.start_m)
    emit("add.u32", c.rows[1], c.rows[0], 8)
    if causal:
        emit("add.u32", c.band_start, c.start_m, c.diag)
        emit("add.u32", c.band_start, c.band_start, 1)
        emit("and.b32", c.band_start, c.band_start, -BLOCK_N & 0xFFFFFFFF)
        emit("min.u32", c.band_start, c.band_start, c.full_end)
        for row, lim in zip(c.rows, c.limits):
            emit("add.u32", lim, row, c.diag)
            emit("min.u32", lim, lim, c.last_key)
    else:
        emit("mov.u32", c.band_start, c.full_end)
        for lim in c.limits:
            emit("mov.u32", lim, c.last_key)

    prog.comment("per-head factors: t = S * fac (log2 domain); v descales for the epilogue")
    off = prog.reg("u64")
    addr = prog.reg("u64")
    c.fac = prog.reg("f32")
    emit("mul.wide.u32", off, c.bkv, 4)
    emit("add.u64", addr, c.fac_ptr, off)
    emit("ld.global.f32", c.fac, addr)
    col_idx = prog.reg("u32")
    emit("mad.lo.u32", col_idx, c.bkv, HEAD_DIM, c.q)
    emit("add.u32", col_idx, col_idx, c.q)                 # bkv * 128 + 2q
    c.vd_base = prog.reg("u64")
    emit("mul.wide.u32", off, col_idx, 4)
    emit("add.u64", c.vd_base, c.vd_ptr, off)


def emit_positive_factor(prog: Program, c: Ctx, q_tile: Reg | None = None, sync=None) -> None:
    """Make c > 0, which the row max on S needs: for a negative c (a negative descale), flip
    the sign bits of the Q tile (``q_tile``, default the first) in shared memory (S -> -S) and
    negate c. t = S c is unchanged. ``sync()`` emits the barrier of the threads that share
    the tile (default: the CTA's)."""
    emit = prog.emit
    negative = prog.reg("pred")
    emit("setp.lt.f32", negative, c.fac, f32(0.0))
    emit("bra", "FACTOR_POSITIVE", guard=f"!{negative}")       # uniform: c is per (batch, kv head)
    emit("mul.f32", c.fac, c.fac, f32(-1.0))
    tid, base, addr, word = prog.regs("u32", 4)
    emit("mov.u32", tid, "%tid.x")
    if q_tile is not None:
        emit("and.b32", tid, tid, THREADS - 1)
    emit("mad.lo.u32", base, tid, c.q_bytes // THREADS, c.smem if q_tile is None else q_tile)
    for i in range(c.q_bytes // THREADS // 4):
        emit("add.u32", addr, base, 4 * i)
        emit("ld.shared.b32", word, addr)
        emit("xor.b32", word, word, 0x80808080)
        emit("st.shared.b32", addr, word)
    emit("fence.proxy.async")                  # generic-proxy writes, read next by wgmma
    sync() if sync else emit("bar.sync", 0)
    prog.label("FACTOR_POSITIVE")


def stage(prog: Program, c: Ctx, block: Reg) -> tuple[Reg, Reg, Reg, Reg]:
    """(K tile, V^T tile, mbarrier, phase parity) of key block ``block``'s stage."""
    emit = prog.emit
    stage, phase, k_tile, v_tile, bar = prog.regs("u32", 5)
    if c.stages & (c.stages - 1) == 0:       # a power of two: ptxas keeps div/rem generic
        emit("and.b32", stage, block, c.stages - 1)
        emit("shr.u32", phase, block, c.stages.bit_length() - 1)
    else:
        emit("rem.u32", stage, block, c.stages)
        emit("div.u32", phase, block, c.stages)
    emit("and.b32", phase, phase, 1)
    emit("mad.lo.u32", k_tile, stage, stage_bytes(c.dqk), c.smem)
    emit("add.u32", k_tile, k_tile, c.stage0)
    emit("add.u32", v_tile, k_tile, BLOCK_N * c.dqk)
    emit("mad.lo.u32", bar, stage, 8, c.bar0)
    return k_tile, v_tile, bar, phase


def emit_kv_load(prog: Program, c: Ctx, block: Reg, slot: Reg | None = None) -> None:
    """Thread 0 (the caller guards): K block ``block`` and its V^T into the stage of load
    number ``slot`` (default: ``block``; a persistent CTA counts its loads across tiles)."""
    emit = prog.emit
    k_tile, v_tile, bar, _ = stage(prog, c, block if slot is None else slot)
    key0 = prog.reg("u32")
    emit("mul.lo.u32", key0, block, BLOCK_N)
    emit("mbarrier.expect_tx", bar, stage_bytes(c.dqk))
    emit("tma.load.4d", k_tile, c.maps["k_map"], c.zero, c.kvh, key0, c.b, bar)
    if c.dqk > HEAD_DIM:                                   # K columns 128.. by their own map
        tail = prog.reg("u32")
        emit("add.u32", tail, k_tile, KV_BYTES)
        emit("tma.load.4d", tail, c.maps["k_tail_map"], c.col_tail, c.kvh, key0, c.b, bar)
    emit("tma.load.3d", v_tile, c.maps["vt_map"], key0, c.zero, c.bkv, bar)


def emit_q_load(prog: Program, c: Ctx, q_tile, row, bar) -> None:
    """Thread 0: the Q tile(s) of 64 rows from ``row`` into ``q_tile`` (mbarrier ``bar``)."""
    prog.emit("tma.load.4d", q_tile, c.maps["q_map"], c.zero, c.h, row, c.b, bar)
    if c.dqk > HEAD_DIM:
        tail = prog.reg("u32")
        prog.emit("add.u32", tail, q_tile, Q_BYTES)
        prog.emit("tma.load.4d", tail, c.maps["q_tail_map"], c.col_tail, c.h, row, c.b, bar)


def emit_kv_wait(prog: Program, c: Ctx, j: Reg, tag: str) -> None:
    """Spin until key block ``j``'s K and V^T have landed in its stage."""
    _, _, bar, phase = stage(prog, c, j)
    emit_wait(prog, bar, phase, f"WAIT_KV{tag}")


def emit_scores(prog: Program, c: Ctx, j: Reg, dq: Reg, s: list[Reg], yes: Reg, tag: str,
                 wait: bool = True) -> None:
    """Wait for key block ``j``'s stage (unless the caller did), then issue S = Q K^T into
    ``s`` (committed, not waited)."""
    emit = prog.emit
    k_tile, _, bar, phase = stage(prog, c, j)
    if wait:
        emit_wait(prog, bar, phase, f"WAIT_KV{tag}")
    tiles = [(dq, emit_descriptor(prog, k_tile), HEAD_DIM)]
    if c.dqk > HEAD_DIM:                                   # the tail tiles: Q_BYTES / KV_BYTES on
        q_tail, k_tail = prog.reg("u32"), prog.reg("u32")
        emit("add.u32", q_tail, c.q_tile, Q_BYTES)
        emit("add.u32", k_tail, k_tile, KV_BYTES)
        tiles.append((emit_descriptor(prog, q_tail, TAIL), emit_descriptor(prog, k_tail, TAIL), TAIL))
    prog.comment("S = Q K^T")
    s_list = ", ".join(map(str, s))
    emit("wgmma.fence")
    first = True
    for dq_t, dk_t, width in tiles:
        for step in range(width // 32):                    # 32 columns: 2 descriptor units
            ak, bk = prog.regs("u64", 2)
            emit("add.u64", ak, dq_t, 2 * step)
            emit("add.u64", bk, dk_t, 2 * step)
            emit("wgmma.m64n128k32.e4m3.ss", s_list, ak, bk, 0 if first else yes)
            first = False
    emit("wgmma.commit")


def emit_setup(prog: Program, c: Ctx, rule: str, rowsum: str, counts: list[int], writers: Reg | None = None) -> Reg:
    """Thread 0 initializes the mbarriers (arrival ``counts``, from Q's on); the ones tile
    (rowsum "mma" / "hmma": B of the row-sum wgmmas) is written by the first 128 threads
    (``writers``: their predicate, when the CTA has more); then a CTA-wide barrier. Returns
    the ones tile's shared address."""
    emit = prog.emit
    for k, count in enumerate(counts):
        bar = prog.reg("u32")
        emit("add.u32", bar, c.bar_q, 8 * k)
        emit("mbarrier.init", bar, count, guard=c.leader)
    emit("fence.mbarrier_init")
    ones, ones_word, tid8 = prog.regs("u32", 3)
    emit("add.u32", ones, c.smem, c.stage0 - ONES_BYTES)
    if rowsum in ("mma", "hmma"):
        prog.comment("the ones tile: 128 threads x 8 bytes, visible to wgmma (the async proxy)")
        emit("mov.u32", tid8, "%tid.x")
        emit("mad.lo.u32", tid8, tid8, 8, ones)
        emit("mov.u32", ones_word, E4M3_ONE_X4 if rowsum == "mma" else HALF_ONE_X2 if rule == "exact" else HALF_256_X2)
        emit("st.shared.v2.b32", tid8, ones_word, ones_word, guard=writers)
        emit("fence.proxy.async")
    emit("bar.sync", 0)
    return ones


def emit_epilogue(prog: Program, c: Ctx, total: list[Reg], A: list[Reg], l: list[Reg]) -> None:
    """out = total / l * v_descale (BF16), LSE = ln2 (A + log2 l - 8); rows past seqlen_q skipped."""
    emit = prog.emit
    inv, lg = prog.regs("f32", 2), prog.regs("f32", 2)
    ok = prog.regs("pred", 2)
    row_base = prog.regs("u64", 2)
    idx, bsq = prog.regs("u32", 2)
    emit("mul.lo.u32", bsq, c.b, c.sq)
    for half in (0, 1):
        emit("rcp.f32", inv[half], l[half])
        emit("setp.lt.u32", ok[half], c.rows[half], c.sq)
        emit("add.u32", idx, bsq, c.rows[half])
        emit("mad.lo.u32", idx, idx, c.hq, c.h)              # (b * Sq + row) * Hq + h
        emit("mul.lo.u32", idx, idx, HEAD_DIM)
        emit("add.u32", idx, idx, c.q)
        emit("add.u32", idx, idx, c.q)                       # + 2q
        off = prog.reg("u64")
        emit("mul.wide.u32", off, idx, 2)
        emit("add.u64", row_base[half], c.out, off)
    for jb in range(ACC // 4):
        vd = prog.regs("f32", 2)
        addr = prog.reg("u64")
        emit("add.u64", addr, c.vd_base, 4 * 8 * jb)
        emit("ld.global.v2.f32", vd[0], vd[1], addr)
        for half in (0, 1):
            vals = prog.regs("f32", 2)
            for e in (0, 1):
                emit("mul.f32", vals[e], total[4 * jb + 2 * half + e], inv[half])
                emit("mul.f32", vals[e], vals[e], vd[e])
            packed = prog.reg("b32")
            emit("cvt.bf16x2.f32", packed, vals[1], vals[0])  # high half: the odd column
            dst = prog.reg("u64")
            emit("add.u64", dst, row_base[half], 2 * 8 * jb)
            emit("st.global.b32", dst, packed, guard=ok[half])

    prog.comment("LSE from the first thread of each quad")
    first = prog.reg("pred")
    emit("setp.eq.u32", first, c.q, 0)
    bh = prog.reg("u32")
    emit("mad.lo.u32", bh, c.b, c.hq, c.h)
    for half in (0, 1):
        store = prog.reg("pred")
        emit("and.pred", store, ok[half], first)
        emit("lg2.f32", lg[half], l[half])
        emit("add.f32", lg[half], lg[half], A[half])
        emit("sub.f32", lg[half], lg[half], f32(float(P_OFFSET_LOG2)))
        emit("mul.f32", lg[half], lg[half], f32(LN2))
        emit("mad.lo.u32", idx, bh, c.sq, c.rows[half])
        off, addr = prog.regs("u64", 2)
        emit("mul.wide.u32", off, idx, 4)
        emit("add.u64", addr, c.lse, off)
        emit("st.global.f32", addr, lg[half], guard=store)


def emit_prefetch(prog: Program, c: Ctx, block: Reg, tag: str) -> None:
    """Thread 0 starts the loads of key block ``block`` if it exists (its stage is free: the
    block that used it last finished before the last bar.sync)."""
    go = prog.reg("pred")
    prog.emit("setp.lt.u32", go, block, c.n_blocks)
    prog.emit("and.pred", go, go, c.leader)
    prog.emit("bra.div", f"PREFETCHED{tag}", guard=f"!{go}")
    emit_kv_load(prog, c, block)
    prog.label(f"PREFETCHED{tag}")
