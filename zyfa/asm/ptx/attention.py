"""The generated FP8 prefill attention kernel for sm_90a (head dim 128), first version:
the whole algorithm of ``zyfa.reference.fp8_attention_spec``, written for correctness.

Schedule (one CTA = one warpgroup = 64 query rows of one head; key blocks of 128 = the
spec's block_n; grid (batch * heads, query tiles), heaviest query tiles first):

  prologue   TMA loads of the Q tile and the first K / V^T block; block bounds of the
             unmasked part and the masked diagonal band (bottom-right causal, tails)
  per block  thread 0 starts the TMA loads of the next block into the other stage;
             S = Q K^T (4 x wgmma m64n128k32, both operands in shared memory);
             mask S (band and tail blocks only); row max over the quad, taken on S
             (m = max(S) c: c > 0, made so by flipping Q's signs for a negative descale);
             lazy reference A; P codes of y = fma(S, c, -m) by the exact rule (MUFU.EX2,
             the hardware's E4M3 rounding) or a lean rule (FMA pipe + magic number);
             row sum of the rounded P (float32 on the ALUs, or half-precision wgmmas
             with float32 accumulation, "hmma"); P packed into the A operand;
             block = P V^T (4 x wgmma, A from registers) in a fresh accumulator;
             total = total * alpha + block * beta (two-level accumulation; the multiply
             only when a reference moved)
  epilogue   out = total / l * v_descale in BF16, LSE = ln2 (A + log2 l - 8)

V^T arrives with its keys permuted inside each 16-key group (fragments.KEY_OF_SLOT) so P
goes from the QK^T accumulator to the A operand without moving between threads.
``pipelined=True`` issues the next block's Q K^T before this block's softmax (v8). Versions,
predictions and H200 measurements: bench/PTX_NOTES.md.
"""
from __future__ import annotations

import dataclasses

from ... import fp8 as F
from ...reference import NEG_FLOOR, RESCALE_THRESHOLD
from ..program import Program, Reg
from .fragments import p_sources
from ...fp8 import HALF_RULES
from .lean_p import (PTX_RULES, emit_p_code, emit_p_code_pair, emit_p_exact_pair, emit_pack4, emit_pack_pairs,
                     half_constants)
from .smem import emit_descriptor, emit_wait
from .target import f32, module, program

BLOCK_M, BLOCK_N, HEAD_DIM = 64, 128, 128     # HEAD_DIM: one 128-byte column tile (and Dv)
HEAD_DIMS = ((128, 128), (192, 128))           # (Dqk, Dv) the kernel takes; MLA's 192 as two tiles
THREADS = 128
STAGES = 2                                  # K / V^T stages; the pipelined kernel takes 3
Q_BYTES = BLOCK_M * HEAD_DIM
ONES_BYTES = 8 * HEAD_DIM                   # 8 rows of E4M3 ones: B of the row-sum wgmma
KV_BYTES = BLOCK_N * HEAD_DIM               # one K tile or one V^T tile
STAGE_BYTES = 2 * KV_BYTES
STAGE0 = Q_BYTES + ONES_BYTES               # 1024-aligned, as 128-byte swizzled tiles must be
E4M3_ONE_X4 = 0x38383838
ROWSUMS = ("mma", "alu", "hmma")
HALF_256_X2 = 0x5C005C00                    # two halves of 256: B of the half-precision row-sum wgmma
HALF_ONE_X2 = 0x3C003C00                    # two halves of 1: the same B for the exact rule's P values
# the lean and half rules, bit-exact to the spec, and exact (MUFU.EX2 + the hardware's E4M3
# rounding: the spec's codes but within MUFU's error of a rounding midpoint)
ATTENTION_RULES = PTX_RULES + ("exact",)
HMMA_RULES = HALF_RULES + ("exact",)        # the rules whose P pairs become half2 A operands
LN2 = 0.6931471805599453
ACC = BLOCK_N // 2                          # f32 accumulator registers per thread (m64n128)
# 168 registers x 128 threads x 3 CTAs fits the SM's 64K registers, and 3 x shared_bytes(STAGES)
# its 227 KB of shared memory: three CTAs per SM, so one's softmax can overlap another's wgmma.
# (rowsum="hmma" waits for its half-precision row sums before P.V, so its half2 P is dead
# before P.V's accumulator lives and it fits the same budget. Pipelined: Q K^T of the next
# block in flight during this block's softmax holds a second S, 64 registers; it takes up to
# 255, two CTAs an SM.)
REGISTER_BUDGET = 168


SCHEDULES = ("serial", "pipelined", "pingpong", "persistent", "specialized")
PERSISTENT = "persistent"     # the ping-pong kernel launched with one CTA an SM


def consumers(schedule: str) -> int:
    """Warpgroups that compute (64 query rows each) in one CTA: two in the ping-pong kernel
    (pingpong.py), which also has a producer warpgroup."""
    return 2 if schedule in ("pingpong", "persistent", "specialized") else 1


def stages(schedule: str) -> int:
    """K / V^T stages: the pipelined kernel loads block j + 2 while S(j + 1) reads j + 1; the
    ping-pong kernel's producer runs up to three blocks ahead of its consumers."""
    return {"serial": STAGES, "pipelined": 3, "pingpong": 4, "persistent": 4, "specialized": 4}[schedule]


TAIL = 64      # Dqk 192: columns 128-191 as a second tile of 64-byte rows (64-byte swizzle)


def stage_bytes(dqk: int) -> int:
    """One stage: the K tile(s) (128 keys x Dqk bytes), then V^T."""
    return BLOCK_N * dqk + KV_BYTES


def stage0(n_consumers: int, dqk: int = HEAD_DIM) -> int:
    """Byte offset of stage 0: after the Q tiles (64 rows x Dqk bytes a consumer) and the
    ones tile; 1024-aligned for Dqk 128 and 192."""
    return BLOCK_M * dqk * n_consumers + ONES_BYTES


def bar_offset(n_stages: int, n_consumers: int = 1, dqk: int = HEAD_DIM) -> int:
    """Byte offset of the mbarriers (Q's, one per stage, then the ping-pong kernel's one per
    stage that says it is free again), after the stages."""
    return stage0(n_consumers, dqk) + n_stages * stage_bytes(dqk)


def shared_bytes(schedule: str, dqk: int = HEAD_DIM) -> int:
    """Dynamic shared memory of a kernel (+ slack to align the base to 1024)."""
    n, cons = stages(schedule), consumers(schedule)
    return bar_offset(n, cons, dqk) + 8 * (1 + n * (2 if cons > 1 else 1)) + 1024


PARAMS = [(".align 64 .b8", "q_map[128]"), (".align 64 .b8", "k_map[128]"), (".align 64 .b8", "vt_map[128]"),
          (".align 64 .b8", "q_tail_map[128]"), (".align 64 .b8", "k_tail_map[128]"),
          (".u64", "out_ptr"), (".u64", "lse_ptr"), (".u64", "fac_ptr"), (".u64", "vd_ptr"),
          (".u32", "seqlen_q"), (".u32", "seqlen_k"), (".u32", "heads"), (".u32", "kv_heads"), (".u32", "batch")]


def kernel_name(rule: str, causal: bool, rowsum: str = "alu", schedule: str = "serial", dqk: int = HEAD_DIM) -> str:
    return (f"zyfa_attn_fp8_d{dqk}_{rule}_{'causal' if causal else 'full'}_rowsum_{rowsum}"
            + ("" if schedule == "serial" else f"_{schedule}"))


def _acc_row_half(i: int) -> int:
    """0 for accumulator registers of row g, 1 for row g + 8."""
    return (i % 4) // 2


def _acc_column(i: int) -> int:
    """Column of accumulator register i, less the thread's 2q."""
    return 8 * (i // 4) + i % 2


class _Ctx:
    """Registers the prologue sets up and the loop and epilogue read."""


def _prologue(prog: Program, causal: bool, n_stages: int, n_consumers: int = 1, dqk: int = HEAD_DIM) -> _Ctx:
    """Parameters, thread coordinates, the work of this CTA and block bounds. With
    ``n_consumers`` > 1 the CTA has a producer warpgroup (c.wg 0) and consumer warpgroups
    1.., each of 64 query rows; thread coordinates are within the warpgroup and the key
    blocks span the CTA's rows."""
    c = _Ctx()
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

    prog.comment("work: query tile from ctaid.x (last tiles first), (batch, head) from ctaid.y: the CTAs")
    prog.comment("running together share one head's K/V, which then stays in L2 (heads fastest thrashed it)")
    bh, ty, nty = prog.regs("u32", 3)
    emit("mov.u32", bh, "%ctaid.y")
    emit("mov.u32", ty, "%ctaid.x")
    emit("mov.u32", nty, "%nctaid.x")
    emit("sub.u32", ty, nty, ty)
    emit("sub.u32", ty, ty, 1)
    c.hkv, c.causal, c.n_consumers = hkv, causal, n_consumers
    c.group = prog.reg("u32")
    emit("div.u32", c.group, c.hq, hkv)
    c.diag, c.full_end, c.last_key = prog.regs("u32", 3)
    emit("sub.u32", c.diag, c.sk, c.sq)                    # bottom-right: row i sees keys <= i + diag
    emit("and.b32", c.full_end, c.sk, -BLOCK_N & 0xFFFFFFFF)
    emit("sub.u32", c.last_key, c.sk, 1)
    c.b, c.h, c.kvh, c.bkv, c.tile_m, c.n_blocks = prog.regs("u32", 6)
    c.start_m = prog.reg("u32") if n_consumers > 1 else c.tile_m
    _emit_work(prog, c, ty, bh)
    c.warp, c.g, c.fac_ptr, c.vd_ptr = warp, g, fac_ptr, vd_ptr
    if n_consumers == 1:
        _emit_rows(prog, c, causal)

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


def _emit_work(prog: Program, c: _Ctx, m_tile: Reg, bh: Reg) -> None:
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


def _emit_rows(prog: Program, c: _Ctx, causal: bool) -> None:
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


def _emit_positive_factor(prog: Program, c: _Ctx, q_tile: Reg | None = None, sync=None) -> None:
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


def _stage(prog: Program, c: _Ctx, block: Reg) -> tuple[Reg, Reg, Reg, Reg]:
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


def _emit_kv_load(prog: Program, c: _Ctx, block: Reg, slot: Reg | None = None) -> None:
    """Thread 0 (the caller guards): K block ``block`` and its V^T into the stage of load
    number ``slot`` (default: ``block``; a persistent CTA counts its loads across tiles)."""
    emit = prog.emit
    k_tile, v_tile, bar, _ = _stage(prog, c, block if slot is None else slot)
    key0 = prog.reg("u32")
    emit("mul.lo.u32", key0, block, BLOCK_N)
    emit("mbarrier.expect_tx", bar, stage_bytes(c.dqk))
    emit("tma.load.4d", k_tile, c.maps["k_map"], c.zero, c.kvh, key0, c.b, bar)
    if c.dqk > HEAD_DIM:                                   # K columns 128.. by their own map
        tail = prog.reg("u32")
        emit("add.u32", tail, k_tile, KV_BYTES)
        emit("tma.load.4d", tail, c.maps["k_tail_map"], c.col_tail, c.kvh, key0, c.b, bar)
    emit("tma.load.3d", v_tile, c.maps["vt_map"], key0, c.zero, c.bkv, bar)


def _emit_q_load(prog: Program, c: _Ctx, q_tile, row, bar) -> None:
    """Thread 0: the Q tile(s) of 64 rows from ``row`` into ``q_tile`` (mbarrier ``bar``)."""
    prog.emit("tma.load.4d", q_tile, c.maps["q_map"], c.zero, c.h, row, c.b, bar)
    if c.dqk > HEAD_DIM:
        tail = prog.reg("u32")
        prog.emit("add.u32", tail, q_tile, Q_BYTES)
        prog.emit("tma.load.4d", tail, c.maps["q_tail_map"], c.col_tail, c.h, row, c.b, bar)


def _emit_mask(prog: Program, c: _Ctx, t: list[Reg], start_n: Reg, copy: bool = False) -> list[Reg]:
    """t = -inf where key > the row's limit (causal diagonal, or past seqlen_k). ``copy``:
    into new registers, leaving t (a wgmma accumulator) unwritten: ptxas serializes the
    wgmmas in flight if other instructions write accumulator registers meanwhile."""
    reach = prog.regs("u32", 2)
    for half in (0, 1):
        prog.emit("sub.s32", reach[half], c.limits[half], start_n)
        prog.emit("sub.s32", reach[half], reach[half], c.q)
        prog.emit("sub.s32", reach[half], reach[half], c.q)       # limit - start_n - 2q
    out = prog.regs("f32", len(t)) if copy else t
    for i, ti in enumerate(t):
        past = prog.reg("pred")
        prog.emit("setp.lt.s32", past, reach[_acc_row_half(i)], _acc_column(i))
        if copy:
            prog.emit("selp.f32", out[i], f32(float("-inf")), ti, past)
        else:
            prog.emit("mov.f32", ti, f32(float("-inf")), guard=past)
    return out


def _emit_quad_reduce(prog: Program, x: Reg, op: str) -> None:
    """x <- op over the four threads of a quad (they hold one row's columns)."""
    other = prog.reg("f32")
    for lane_mask in (1, 2):
        prog.emit("shfl.bfly", other, x, lane_mask)
        prog.emit(op, x, x, other)


def _emit_kv_wait(prog: Program, c: _Ctx, j: Reg, tag: str) -> None:
    """Spin until key block ``j``'s K and V^T have landed in its stage."""
    _, _, bar, phase = _stage(prog, c, j)
    emit_wait(prog, bar, phase, f"WAIT_KV{tag}")


def _emit_scores(prog: Program, c: _Ctx, j: Reg, dq: Reg, s: list[Reg], yes: Reg, tag: str,
                 wait: bool = True) -> None:
    """Wait for key block ``j``'s stage (unless the caller did), then issue S = Q K^T into
    ``s`` (committed, not waited)."""
    emit = prog.emit
    k_tile, _, bar, phase = _stage(prog, c, j)
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


@dataclasses.dataclass
class _Softmax:
    """What a block's softmax leaves for its P V^T and its row update."""
    p_regs: list          # the A operand of P V^T: 4 k-steps x 4 words of packed E4M3 P
    sums: list            # m64n8 row sums (rowsum "mma" / "hmma"; "mma": after P V^T)
    l_alu: list           # rowsum "alu": the rows' sums of P
    alpha: list           # 2^(A - A_new): the total's factor
    beta: list            # 2^(m - A_new): the block's factor
    A_new: list

    def l_blk(self, rowsum: str) -> list:
        return [self.sums[0], self.sums[2]] if rowsum in ("mma", "hmma") else self.l_alu   # rows g, g + 8


def _emit_block(prog: Program, c: _Ctx, rule: str, rowsum: str, j: Reg, start_n: Reg, s: list[Reg],
                d_ones: Reg, total: list[Reg], A: list[Reg], l: list[Reg], yes: Reg, tag: str = "",
                masked: bool | None = None, split_pv: bool = False) -> None:
    """One key block from its scores ``s`` (complete): the softmax, P V^T (waited for, with
    any wgmma still in flight), accumulation. ``masked`` and ``split_pv``: _emit_softmax, _emit_pv."""
    _, v_tile, _, _ = _stage(prog, c, j)
    dv = emit_descriptor(prog, v_tile)
    sm = _emit_softmax(prog, c, rule, rowsum, start_n, s, d_ones, A, yes, tag, masked)
    _emit_pv(prog, rowsum, sm.p_regs, dv, d_ones, sm.sums, total, sm.alpha, sm.beta, yes, tag, 2 if split_pv else 1)
    _emit_row_update(prog, sm, rowsum, l, A)


def _emit_row_update(prog: Program, sm: _Softmax, rowsum: str, l: list[Reg], A: list[Reg]) -> None:
    """l = l * alpha + l_blk * beta; the reference moves to A_new."""
    for half in (0, 1):
        prog.emit("mul.f32", l[half], l[half], sm.alpha[half])
        prog.emit("fma.f32", l[half], sm.l_blk(rowsum)[half], sm.beta[half], l[half])
        prog.emit("mov.f32", A[half], sm.A_new[half])


def _emit_softmax(prog: Program, c: _Ctx, rule: str, rowsum: str, start_n: Reg, s: list[Reg], d_ones: Reg,
                  A: list[Reg], yes: Reg, tag: str, masked: bool | None = None,
                  wait_rowsum: bool = True) -> _Softmax:
    """Mask, row max, references, P codes packed into the A operand, row sums of the rounded
    P (rowsum "hmma": issued as a wgmma group, waited for unless ``wait_rowsum`` is False).

    ``masked``: None masks in place where the block needs it; True masks into new registers;
    False does not mask."""
    emit = prog.emit
    if masked is None:
        unmasked = prog.reg("pred")
        emit("setp.lt.u32", unmasked, start_n, c.band_start)
        emit("bra", f"SCORES_READY{tag}", guard=unmasked)
        _emit_mask(prog, c, s, start_n)
        prog.label(f"SCORES_READY{tag}")
    elif masked:
        s = _emit_mask(prog, c, s, start_n, copy=True)

    prog.comment("row max of t = S c, taken on S (c > 0: rounding is monotone), lazy reference A, r = m")
    m, neg_m = prog.regs("f32", 2), prog.regs("f32", 2)
    A_new, alpha, beta, thr, diff = (prog.regs("f32", 2) for _ in range(5))
    for half in (0, 1):
        regs = [si for i, si in enumerate(s) if _acc_row_half(i) == half]
        emit("max.nan.f32", m[half], regs[0], regs[1])
        for si in regs[2:]:
            emit("max.nan.f32", m[half], m[half], si)
        _emit_quad_reduce(prog, m[half], "max.nan.f32")
        all_masked = prog.reg("pred")
        emit("setp.eq.f32", all_masked, m[half], f32(float("-inf")))
        emit("mul.f32", m[half], m[half], c.fac)
        emit("mov.f32", m[half], f32(float("-inf")), guard=all_masked)   # -inf * 0 would be NaN
        emit("max.nan.f32", m[half], m[half], f32(NEG_FLOOR))
        emit("mul.f32", neg_m[half], m[half], f32(-1.0))
        moved = prog.reg("pred")
        emit("add.f32", thr[half], A[half], f32(RESCALE_THRESHOLD))
        emit("setp.gt.f32", moved, m[half], thr[half])
        emit("selp.f32", A_new[half], m[half], A[half], moved)
        emit("sub.f32", diff[half], m[half], A_new[half])
        emit("ex2.f32", beta[half], diff[half])
        emit("sub.f32", diff[half], A[half], A_new[half])
        emit("ex2.f32", alpha[half], diff[half])

    prog.comment(f"P codes ({rule}) packed into the A operand; row sums of the rounded P ({rowsum})")
    exact = rule == "exact"
    l_blk = prog.regs("f32", 2)
    if rowsum == "alu":
        for half in (0, 1):
            emit("mov.f32", l_blk[half], f32(0.0))
    if exact:                          # P = 2^(y + 8): the offset folded into the FFMA's addend
        neg_m8 = prog.regs("f32", 2)
        for half in (0, 1):
            emit("add.f32", neg_m8[half], neg_m[half], f32(float(F.P_OFFSET_LOG2)))
        neg_m = neg_m8
    ys = []
    for i, si in enumerate(s):
        y = prog.reg("f32")
        emit("fma.f32", y, si, c.fac, neg_m[_acc_row_half(i)])   # the spec's y = fma(S, c, -r) (+ 8: exact)
        ys.append(y)

    # the code shifted into a float32's exponent/mantissa is P * 2^-120 exactly (subnormal
    # codes land on float32 subnormals): a shift (and a mask) and one FMA per P
    def add_to_rowsum(i, code_bits):
        emit("fma.f32", l_blk[_acc_row_half(i)], code_bits, f32(2.0 ** 120), l_blk[_acc_row_half(i)])

    def add_code_to_rowsum(i, word, bit):
        """Add the code at bits ``bit`` .. ``bit`` + 7 of ``word`` (accumulator register i)."""
        scaled = prog.reg("b32")
        emit("shl.b32" if bit <= 20 else "shr.b32", scaled, word, abs(20 - bit))
        emit("and.b32", scaled, scaled, "0x0FF00000")
        add_to_rowsum(i, scaled)

    p16 = {}                           # rowsum="hmma": the half2 P of each pair, in P * 2^-8 (lean) or P (exact)
    if exact:                          # two scores (same row, adjacent keys) a 16-bit pair of codes
        pairs = {i: emit_p_exact_pair(prog, ys[i], ys[i + 1]) for i in range(0, ACC, 2)}
        p_regs = []
        for k in range(BLOCK_N // 32):
            p_regs.append([])
            for src in p_sources(k):
                word = prog.reg("b32")
                emit("mov.b32.pack", word, pairs[src[0]], pairs[src[2]])
                p_regs[-1].append(word)
                for byte, i in enumerate(src) if rowsum == "alu" else ():
                    add_code_to_rowsum(i, word, 8 * byte)
        for i, pair in pairs.items() if rowsum == "hmma" else ():
            p16[i] = prog.reg("b32")
            emit("cvt.f16x2.e4m3x2", p16[i], pair)           # E4M3 values are exact halves
    elif rule in HALF_RULES:                                 # two scores (same row, adjacent keys) a word
        pairs = {}
        consts = half_constants(prog)
        for i in range(0, ACC, 2):
            w = pairs[i] = emit_p_code_pair(prog, ys[i], ys[i + 1], consts)   # codes in bytes 0 and 2
            if rowsum == "hmma":
                # an E4M3 code shifted into a half's exponent/mantissa is P * 2^-8 exactly
                # (subnormals too): two P of a pair as the half2 A operand of the row-sum wgmma
                masked = p16[i] = prog.reg("b32")
                emit("and.b32", masked, w, "0x00FF00FF")
                emit("shl.b32", masked, masked, 7)
            if rowsum == "alu":
                add_code_to_rowsum(i, w, 0)
                add_code_to_rowsum(i + 1, w, 16)
        p_regs = [[emit_pack_pairs(prog, pairs[src[0]], pairs[src[2]]) for src in p_sources(k)]
                  for k in range(BLOCK_N // 32)]
    else:
        codes = []
        for i, y in enumerate(ys):
            w = emit_p_code(prog, y, rule)                   # low byte: the E4M3 code
            codes.append(w)
            if rowsum == "alu":
                scaled = prog.reg("b32")
                emit("shl.b32", scaled, w, 20)               # the bits above the code are the magic's zeros
                add_to_rowsum(i, scaled)
        p_regs = [[emit_pack4(prog, [codes[r] for r in src]) for src in p_sources(k)] for k in range(BLOCK_N // 32)]
    if rowsum == "alu":
        for half in (0, 1):
            _emit_quad_reduce(prog, l_blk[half], "add.f32")

    sums = prog.regs("f32", 4)           # m64n8: every column holds the row's sum
    if rowsum == "hmma":
        # keys 16 t .. 16 t + 15 of rows g and g + 8: the half2 pairs of accumulator column
        # blocks 2 t and 2 t + 1 are the f16 A fragment (a0..a3) as they stand; B: halves of 256
        # (P * 2^-8, the half rule) or of 1 (P, exact) (the ones tile: every element, so no
        # descriptor step), float32 accumulation. Waited
        # for before P.V, so the half2 P is dead before P.V's accumulator lives (registers)
        prog.comment("row sums of P in half precision")
        emit("wgmma.fence")
        for t in range(BLOCK_N // 16):
            a_regs = ", ".join(str(p16[8 * t + d]) for d in (0, 2, 4, 6))
            emit("wgmma.m64n8k16.f16.rs", ", ".join(map(str, sums)), a_regs, d_ones, 0 if t == 0 else yes)
        emit("wgmma.commit")
        if wait_rowsum:
            emit("wgmma.wait", 0)
    return _Softmax(p_regs, sums, l_blk, alpha, beta, A_new)


def _emit_rescale(prog: Program, total: list[Reg], alpha: list[Reg], tag: str) -> None:
    """total *= alpha, only when some row's reference moved (alpha != 1)."""
    emit = prog.emit
    keep = prog.regs("pred", 2)
    for half in (0, 1):
        emit("setp.neu.f32", keep[half], alpha[half], f32(1.0))
    either = prog.reg("pred")
    emit("or.pred", either, keep[0], keep[1])
    emit("bra.div", f"RESCALED{tag}", guard=f"!{either}")
    for i, ti in enumerate(total):
        emit("mul.f32", ti, ti, alpha[_acc_row_half(i)])
    prog.label(f"RESCALED{tag}")


def _emit_pv_issue(prog: Program, rowsum: str, p_regs, dv: Reg, d_ones: Reg, sums, yes: Reg,
                   h: int = 0, parts: int = 1) -> list[Reg]:
    """Issue (and commit) value columns ``h`` of ``parts`` of block = P V^T into a fresh
    accumulator, which it returns (+ the row sums = P . ones, rowsum "mma")."""
    emit = prog.emit
    width = ACC // parts
    op = {1: "wgmma.m64n128k32.e4m3.rs", 2: "wgmma.m64n64k32.e4m3.rs"}[parts]
    prog.comment(f"block columns {128 // parts * h}.. = P V^T in a fresh accumulator"
                 + ("; row sums = P . ones" if rowsum == "mma" and h == 0 else ""))
    o = prog.regs("f32", width)
    o_list = ", ".join(map(str, o))
    emit("wgmma.fence")
    for k in range(BLOCK_N // 32):
        bk = prog.reg("u64")
        a_regs = ", ".join(map(str, p_regs[k]))
        emit("add.u64", bk, dv, 2 * k + HEAD_DIM // parts * 128 // 16 * h)
        emit(op, o_list, a_regs, bk, 0 if k == 0 else yes)
        if rowsum == "mma" and h == 0:
            ok = prog.reg("u64")
            emit("add.u64", ok, d_ones, 2 * k)
            emit("wgmma.m64n8k32.e4m3.rs", ", ".join(map(str, sums)), a_regs, ok, 0 if k == 0 else yes)
    emit("wgmma.commit")
    return o


def _emit_fold(prog: Program, o: list[Reg], total: list[Reg], beta: list[Reg], h: int = 0) -> None:
    """total columns of part ``h`` += block * beta (the total already multiplied by alpha)."""
    for i, oi in enumerate(o):
        ti = total[len(o) * h + i]
        prog.emit("fma.f32", ti, oi, beta[_acc_row_half(i)], ti)


def _emit_pv(prog, rowsum, p_regs, dv, d_ones, sums, total, alpha, beta, yes, tag, parts: int = 1) -> None:
    """block = P V^T in a fresh accumulator (+ the row sums = P . ones, rowsum "mma"); then
    total = total * alpha + block * beta. ``parts`` = 2: in two halves of 64 value columns,
    each folded into the total before the next (32 registers fewer): V^T rows 64 h .. start
    8 KB (512 descriptor units) into the tile, and register i of the m64n64 half is register
    32 h + i of the m64n128 total."""
    if parts > 1:                      # the total is folded half by half: rescale it first
        _emit_rescale(prog, total, alpha, tag)
    for h in range(parts):
        o = _emit_pv_issue(prog, rowsum, p_regs, dv, d_ones, sums, yes, h, parts)
        prog.emit("wgmma.wait", 0)
        if parts == 1:
            prog.comment("total = total * alpha + block * beta; the multiply only when a reference moved")
            _emit_rescale(prog, total, alpha, tag)
        _emit_fold(prog, o, total, beta, h)


def _emit_epilogue(prog: Program, c: _Ctx, total: list[Reg], A: list[Reg], l: list[Reg]) -> None:
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
        emit("sub.f32", lg[half], lg[half], f32(float(F.P_OFFSET_LOG2)))
        emit("mul.f32", lg[half], lg[half], f32(LN2))
        emit("mad.lo.u32", idx, bh, c.sq, c.rows[half])
        off, addr = prog.regs("u64", 2)
        emit("mul.wide.u32", off, idx, 4)
        emit("add.u64", addr, c.lse, off)
        emit("st.global.f32", addr, lg[half], guard=store)


def _emit_prefetch(prog: Program, c: _Ctx, block: Reg, tag: str) -> None:
    """Thread 0 starts the loads of key block ``block`` if it exists (its stage is free: the
    block that used it last finished before the last bar.sync)."""
    go = prog.reg("pred")
    prog.emit("setp.lt.u32", go, block, c.n_blocks)
    prog.emit("and.pred", go, go, c.leader)
    prog.emit("bra.div", f"PREFETCHED{tag}", guard=f"!{go}")
    _emit_kv_load(prog, c, block)
    prog.label(f"PREFETCHED{tag}")


def _emit_serial_loop(prog, c, rule, rowsum, dq, d_ones, total, A, l, yes, j, start_n) -> None:
    """Per block: prefetch the next block; S = Q K^T, waited for; the softmax and P V^T."""
    emit = prog.emit
    s = prog.regs("f32", ACC)
    next_j, more = prog.reg("u32"), prog.reg("pred")
    prog.label("BLOCK_LOOP")
    emit("add.u32", next_j, j, 1)
    _emit_prefetch(prog, c, next_j, "")
    _emit_scores(prog, c, j, dq, s, yes, "")
    emit("wgmma.wait", 0)
    _emit_block(prog, c, rule, rowsum, j, start_n, s, d_ones, total, A, l, yes)
    emit("bar.sync", 0)                           # every warp is done with this stage
    emit("mov.u32", j, next_j)
    emit("add.u32", start_n, start_n, BLOCK_N)
    emit("setp.lt.u32", more, j, c.n_blocks)
    emit("bra", "BLOCK_LOOP", guard=more)


def _emit_pipelined_loop(prog, c, rule, rowsum, dq, d_ones, total, A, l, yes, j, start_n) -> None:
    """S(0) before the loop; per block j: prefetch block j + 2, wait for S(j), issue
    S(j + 1) into the other S registers, then block j's softmax and P V^T (whose wait also
    covers S(j + 1)). Unrolled twice so the two S register sets alternate."""
    emit = prog.emit
    s_regs = (prog.regs("f32", ACC), prog.regs("f32", ACC))
    _emit_scores(prog, c, j, dq, s_regs[0], yes, "_FIRST")
    ahead, next_j = prog.regs("u32", 2)
    has_next, more = prog.reg("pred"), prog.reg("pred")
    prog.label("BLOCK_LOOP")
    for half, (cur, nxt) in enumerate((s_regs, s_regs[::-1])):
        tag = f"_{half}"
        emit("add.u32", ahead, j, 2)
        _emit_prefetch(prog, c, ahead, tag)
        emit("wgmma.wait", 0)                     # S(j) is complete
        emit("add.u32", next_j, j, 1)
        emit("setp.lt.u32", has_next, next_j, c.n_blocks)
        emit("bra", f"NEXT_ISSUED{tag}", guard=f"!{has_next}")      # uniform
        _emit_scores(prog, c, next_j, dq, nxt, yes, tag)
        prog.label(f"NEXT_ISSUED{tag}")
        # the masked and unmasked blocks as separate code: the mask writes new registers,
        # never the scores' (a wgmma accumulator while S(j + 1) is in flight)
        unmasked = prog.reg("pred")
        emit("setp.lt.u32", unmasked, start_n, c.band_start)
        emit("bra", f"UNMASKED{tag}", guard=unmasked)
        _emit_block(prog, c, rule, rowsum, j, start_n, cur, d_ones, total, A, l, yes, tag + "M",
                    masked=True, split_pv=True)
        emit("bra", f"BLOCK_DONE{tag}")
        prog.label(f"UNMASKED{tag}")
        _emit_block(prog, c, rule, rowsum, j, start_n, cur, d_ones, total, A, l, yes, tag + "U",
                    masked=False, split_pv=True)
        prog.label(f"BLOCK_DONE{tag}")
        emit("bar.sync", 0)                       # every warp is done with block j's stage
        emit("mov.u32", j, next_j)
        emit("add.u32", start_n, start_n, BLOCK_N)
        emit("setp.lt.u32", more, j, c.n_blocks)
        emit("bra", "BLOCK_LOOP" if half else "LOOP_DONE", guard=more if half else f"!{more}")
    prog.label("LOOP_DONE")


def _emit_setup(prog: Program, c: _Ctx, rule: str, rowsum: str, counts: list[int], writers: Reg | None = None) -> Reg:
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


def attention_kernel(rule: str = "lean_cubic", causal: bool = True, rowsum: str = "alu",
                     arch: str = "sm_90a", schedule: str = "serial", dqk: int = HEAD_DIM) -> tuple[str, str]:
    """(name, PTX) of the FP8 attention kernel (Dqk ``dqk`` 128 or 192, Dv 128) for one P
    rule and mask kind.

    ``rowsum``: the row sums of the rounded P from the codes on the ALUs in float32 ("alu",
    2 instructions a score, the spec's precision), from half-precision wgmmas with float32
    accumulation ("hmma", exact and half rules: the same sums) or from FP8 wgmmas against a
    tile of ones ("mma"; the tensor cores' truncating accumulation costs ~1e-3).
    ``schedule``: "serial" (one warpgroup a CTA, each block's GEMMs waited for in turn);
    "pipelined": Q K^T of block j + 1 is issued before the softmax of block j, so the
    tensor cores compute it meanwhile (a second S in registers, three K / V^T stages);
    "pingpong": a producer warpgroup and two consumer warpgroups of 64 rows that take turns
    at the tensor cores (pingpong.py; rowsum "hmma" or "alu"); "persistent": the same kernel
    launched with one CTA an SM; "specialized": the same warpgroups without the turns.

    Parameters: TMA maps of q (B, Sq, Hq, 128) and k (B, Sk, Hkv, 128) with boxes of 64 and
    128 rows, and of V^T (B * Hkv, 128, Sk padded to 16) with keys permuted per 16-key
    group and boxes of 128 x 128; out (B, Sq, Hq, 128) BF16; lse (B, Hq, Sq) float32;
    fac (B, Hkv) float32 = q_descale * k_descale * softmax_scale * log2(e); v_descale
    (B, Hkv, 128) float32; seqlen_q, seqlen_k, heads, kv_heads, batch. Grid (ceil(Sq / 64),
    B * Hq) for one warpgroup a CTA; for the ping-pong and specialized kernels a line of
    CTAs that take tiles of 128 rows in turn (one CTA a tile, or persistent: one an SM);
    threads(schedule) threads, shared_bytes(schedule) of dynamic shared memory.
    """
    if rule not in ATTENTION_RULES:
        raise ValueError(f"the generated kernel implements the P rules {ATTENTION_RULES}, got {rule!r}")
    if rowsum not in ROWSUMS:
        raise ValueError(f"rowsum must be one of {ROWSUMS}, got {rowsum!r}")
    if rowsum == "hmma" and rule not in HMMA_RULES:
        raise ValueError(f"rowsum 'hmma' takes the P pairs of a rule in {HMMA_RULES}, not {rule!r}")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if (dqk, HEAD_DIM) not in HEAD_DIMS:
        raise ValueError(f"the generated kernel takes head dims {HEAD_DIMS}, got ({dqk}, {HEAD_DIM})")
    if consumers(schedule) > 1 and rowsum == "mma":
        raise ValueError("the ping-pong and specialized kernels take rowsum 'hmma' or 'alu'")
    if schedule == PERSISTENT:                     # the same kernel; only the launch differs
        schedule = "pingpong"
    name = kernel_name(rule, causal, rowsum, schedule, dqk)
    prog = program()
    shared = [".extern .shared .align 1024 .b8 zyfa_smem[];"]
    if consumers(schedule) > 1:
        from .pingpong import MAX_REGISTERS, emit_pingpong
        emit_pingpong(prog, rule, causal, rowsum, turns=schedule == "pingpong", dqk=dqk)
        return name, module(name, PARAMS, prog, arch, shared, f".maxnreg {MAX_REGISTERS}")
    _emit_one_warpgroup(prog, rule, causal, rowsum, schedule == "pipelined", dqk)
    return name, module(name, PARAMS, prog, arch, shared)


def threads(schedule: str) -> int:
    return THREADS * (1 + consumers(schedule)) if consumers(schedule) > 1 else THREADS


def _emit_one_warpgroup(prog: Program, rule: str, causal: bool, rowsum: str, pipelined: bool, dqk: int) -> None:
    """The serial and pipelined kernels: one warpgroup a CTA, thread 0 loads."""
    emit = prog.emit
    c = _prologue(prog, causal, stages("pipelined" if pipelined else "serial"), dqk=dqk)

    prog.comment("thread 0: barriers, then the Q tile and the first K / V^T block")
    yes = prog.reg("pred")
    emit("setp.eq.u32", yes, c.zero, 0)
    ones = _emit_setup(prog, c, rule, rowsum, [1] * (1 + c.stages))
    emit("bra.div", "LOADS_STARTED", guard=f"!{c.leader}")
    emit("mbarrier.expect_tx", c.bar_q, c.q_bytes)
    _emit_q_load(prog, c, c.smem, c.start_m, c.bar_q)
    c.q_tile = c.smem
    _emit_kv_load(prog, c, c.zero)
    if pipelined:                                  # the first two blocks before the loop
        second, one = prog.reg("pred"), prog.reg("u32")
        emit("setp.gt.u32", second, c.n_blocks, 1)
        emit("bra.div", "LOADS_STARTED", guard=f"!{second}")
        emit("mov.u32", one, 1)
        _emit_kv_load(prog, c, one)
    prog.label("LOADS_STARTED")
    emit_wait(prog, c.bar_q, 0, "WAIT_Q")
    _emit_positive_factor(prog, c)
    dq = emit_descriptor(prog, c.smem)
    d_ones = emit_descriptor(prog, ones)

    total = prog.regs("f32", ACC)
    for ti in total:
        emit("mov.f32", ti, f32(0.0))
    A, l = prog.regs("f32", 2), prog.regs("f32", 2)
    for half in (0, 1):
        emit("mov.f32", A[half], f32(NEG_FLOOR))
        emit("mov.f32", l[half], f32(0.0))
    j, start_n = prog.regs("u32", 2)
    emit("mov.u32", j, 0)
    emit("mov.u32", start_n, 0)

    if pipelined:
        _emit_pipelined_loop(prog, c, rule, rowsum, dq, d_ones, total, A, l, yes, j, start_n)
    else:
        _emit_serial_loop(prog, c, rule, rowsum, dq, d_ones, total, A, l, yes, j, start_n)

    _emit_epilogue(prog, c, total, A, l)
    emit("ret")
