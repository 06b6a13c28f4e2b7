"""Hopper's E4M3 decode kernel, written in Gluon (Triton's explicit-layout dialect).

The arithmetic is the Triton decode kernel's FP8 dots (zyfa.triton_kernels.decode, FP8_DOT;
contract: zyfa.spec.kv_cache.decode_fp8_spec): q in E4M3 (given, or quantized here a row with
a power-of-two descale), the running max, P = E4M3(2^(y + 8)) by the GPU's conversion, the
unrounded row sums. What differs is where each operand lives. A program takes one (sequence,
kv head, key split); its rows (the GQA group's heads times the queries, at most ROWS) are the
N of both dots, the keys their M:

    S^T = K q^T      E4M3 wgmma, K's tile straight from shared memory (K-major)
    O^T += V^T P^T   FP16 wgmma: V's E4M3 tile widened to FP16 in shared memory (exact) and
                     read M-major (the descriptor's transpose, which 8-bit operands lack)

K and V reach shared memory by cp.async, STAGES tiles of BLOCK_N keys in flight; paged caches
gather a key's row through the page table (its rows loaded a tile ahead of their copy). With
the group's rows in M instead (the Triton kernel), Triton 3.6 runs both dots as FP16 mma.sync
and turns V a byte at a time; with the keys in M but Triton's own loads, V is copied through
registers without cp.async (docs/decisions.md).
"""
from __future__ import annotations

import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia import hopper
from triton.experimental.gluon.language.nvidia.ampere import async_copy

from ..spec import constants as C

ROWS = 16              # the dots' N: a program's query rows (GQA group x queries), padded up to it
BLOCK_N = 128          # keys a tile (the dots' M)
STAGES = 2             # tiles in flight: 2 x 128 keys keep two programs an SM (105 KB of shared memory)
NUM_WARPS = gl.constexpr(4)   # one warpgroup

_NEG_FLOOR = gl.constexpr(C.NEG_FLOOR)
_LN2 = gl.constexpr(C.LN2)
_P_OFFSET = gl.constexpr(float(C.P_OFFSET_LOG2))          # P = 2^(y + 8)


# Own combine functions and integer arithmetic where Triton's standard library has @jit helpers
# (sum, max, cdiv, zeros_like): Triton's interpreter, once active in a process, swaps those for
# interpreted functions that a compiled kernel cannot reference.
@gluon.jit
def _max_nan(a, b):
    return gl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@gluon.jit
def _add(a, b):
    return a + b


@gluon.jit
def _max(a, b):
    return gl.maximum(a, b)


@gluon.jit
def _e4m3_codes(x):
    """float32 x as E4M3 (float8e4nv), rounded to nearest even by the GPU's saturating
    conversion, as the Triton kernels' e4m3_rne."""
    codes = gl.inline_asm_elementwise(
        "{ .reg .b16 lo, hi;\n"
        "cvt.rn.satfinite.e4m3x2.f32 lo, $2, $1;\n"
        "cvt.rn.satfinite.e4m3x2.f32 hi, $4, $3;\n"
        "mov.b32 $0, {lo, hi}; }",
        "=r,r,r,r,r", [x], dtype=gl.int8, is_pure=True, pack=4)
    return codes.to(gl.float8e4nv, bitcast=True)


@gluon.jit
def _e4m3_rows(x):
    """(codes, descale) of each row of float32 x: the least power of two 2^e with max|row| / 2^e
    <= 448 (spec.kv_cache.decode_query_e4m3; the Triton kernel's e4m3_rows)."""
    bits = gl.reduce(gl.abs(x), 1, _max).to(gl.int32, bitcast=True)
    e = ((bits >> 23) & 0xFF) - 135 + ((bits & 0x7FFFFF) > 0x600000).to(gl.int32)
    e = gl.minimum(gl.maximum(e, -126), 126)
    descale = ((e + 127) << 23).to(gl.float32, bitcast=True)
    return _e4m3_codes(x * ((127 - e) << 23).to(gl.float32, bitcast=True)[:, None]), descale


@gluon.jit
def _cache_rows(table, b, keys, hi, PAGE: gl.constexpr):
    """(cache row, token) of each key: row b of a dense cache (PAGE 0), else the page the
    table names (keys at or past hi read page 0: their copies are masked)."""
    if PAGE == 0:
        return keys * 0 + b, keys
    return gl.load(table + keys // PAGE, mask=keys < hi, other=0), keys % PAGE


@gluon.jit
def _copy_tile(dst, base, rows, toks, keys, hi, stride_r, stride_t, offs_d):
    """cp.async of one K or V tile (keys at or past hi as zeros)."""
    ptrs = base + (rows.to(gl.int64) * stride_r + toks * stride_t)[:, None] + offs_d[None, :]
    async_copy.async_copy_global_to_shared(dst, ptrs, mask=(keys < hi)[:, None])


@gluon.jit
def _queries(Q, QD, KD, b, kvh, Hkv, stride_qb, stride_qs, stride_qh, qk_scale_log2, SQ: gl.constexpr,
             GROUP: gl.constexpr, D: gl.constexpr, NQ: gl.constexpr, Q_FP8: gl.constexpr, ld: gl.constexpr,
             s_mma: gl.constexpr):
    """(q's rows in E4M3, each row's factor c): row r = g * SQ + qi is head kvh * GROUP + g's
    query qi (the Triton kernel's order)."""
    r_ld = gl.arange(0, NQ, layout=gl.SliceLayout(1, ld))
    cols = gl.arange(0, D, layout=gl.SliceLayout(0, ld))
    q_ptrs = Q + b * stride_qb + ((r_ld % SQ) * stride_qs + (kvh * GROUP + r_ld // SQ) * stride_qh)[:, None] \
        + cols[None, :]
    q = gl.load(q_ptrs, mask=(r_ld < GROUP * SQ)[:, None], other=0.0)
    if Q_FP8:        # the spec's factor c: (dq * dk) * scale
        c = gl.zeros([NQ], gl.float32, gl.SliceLayout(0, s_mma)) + \
            (gl.load(QD + b * Hkv + kvh) * gl.load(KD + b * Hkv + kvh)) * qk_scale_log2
    else:            # q's rows quantized here: (dq_row * scale) * dk
        q, q_scale = _e4m3_rows(q.to(gl.float32))
        c = (gl.convert_layout(q_scale, gl.SliceLayout(0, s_mma)) * qk_scale_log2) * gl.load(KD + b * Hkv + kvh)
    return q, c


@gluon.jit
def _step(k_tile, v_tile, q_s, w_s, p_s, acc, m_i, l_i, c, tile_keys, hi, limit, CAUSAL: gl.constexpr,
          BN: gl.constexpr, NQ: gl.constexpr, ld: gl.constexpr, s_mma: gl.constexpr, o_mma: gl.constexpr):
    """One key tile (its K and V in shared memory): returns (acc, m, l) updated."""
    s_t = hopper.warpgroup_mma(k_tile, q_s.permute((1, 0)), gl.zeros([BN, NQ], gl.float32, layout=s_mma))
    w_s.store(v_tile.load(ld).to(gl.float16))                   # exact: every E4M3 value is an FP16 value
    valid = (tile_keys < hi)[:, None]
    if CAUSAL:
        valid = valid & (tile_keys[:, None] <= limit[None, :])
    t = gl.where(valid, s_t * c[None, :], float("-inf"))
    m_new = _max_nan(m_i, gl.reduce(t, 0, _max_nan))
    alpha = gl.exp2(m_i - m_new)
    # y + 8 = t - (m - 8) in one rounding, as the Triton kernel forms exp2's argument
    y = gl.where(valid, gl.fma(s_t, c[None, :], -(m_new - _P_OFFSET)[None, :]), float("-inf"))
    e = gl.exp2(y)
    l_i = l_i * alpha + gl.reduce(e, 0, _add)                  # spec.rules.sums_unrounded
    p_s.store(gl.permute(_e4m3_codes(e).to(gl.float16), (1, 0)))
    hopper.fence_async_shared()
    gl.thread_barrier()
    alpha_o = gl.convert_layout(alpha, gl.SliceLayout(0, o_mma))
    acc = hopper.warpgroup_mma(w_s.permute((1, 0)), p_s.permute((1, 0)), acc * alpha_o[None, :])
    gl.thread_barrier()                                         # w_s and p_s are rewritten next tile
    return acc, m_new, l_i


@gluon.jit
def _write(acc, m_i, l_i, O, LSE, O_PART, LSE_PART, VD, b, kvh, bk, split, n_splits, Hq, Hkv,
           stride_ob, stride_os, stride_oh, SQ: gl.constexpr, GROUP: gl.constexpr, DV: gl.constexpr,
           NQ: gl.constexpr, SPLIT: gl.constexpr, s_mma: gl.constexpr):
    """The epilogue: the output and LSE (partials where SPLIT). A split none of whose keys a row
    can see leaves l 0: its partial is 0 with LSE -inf, weight 0 in the merge."""
    out_l: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [NUM_WARPS, 1], [1, 0])   # a thread a column of O^T
    r_s = gl.arange(0, NQ, layout=gl.SliceLayout(0, s_mma))
    seen = l_i > 0
    l_safe = gl.where(seen, l_i, 1.0)
    lse = gl.where(seen, _LN2 * (m_i - _P_OFFSET + gl.log2(l_safe)), float("-inf"))
    out = gl.convert_layout(acc * gl.load(VD + b * Hkv + kvh), out_l) / \
        gl.convert_layout(l_safe, gl.SliceLayout(0, out_l))[None, :]          # the spec's order
    r_o = gl.arange(0, NQ, layout=gl.SliceLayout(0, out_l))
    dv = gl.arange(0, DV, layout=gl.SliceLayout(1, out_l))
    if SPLIT:
        part = bk * n_splits + split
        gl.store(O_PART + (part * (GROUP * SQ) + r_o)[None, :] * DV + dv[:, None], out,
                 mask=(r_o < GROUP * SQ)[None, :])
        gl.store(LSE_PART + part * (GROUP * SQ) + r_s, lse, mask=r_s < GROUP * SQ)
    else:
        o_ptrs = O + b * stride_ob + ((r_o % SQ) * stride_os + (kvh * GROUP + r_o // SQ) * stride_oh)[None, :] \
            + dv[:, None]
        gl.store(o_ptrs, out.to(O.dtype.element_ty), mask=(r_o < GROUP * SQ)[None, :])
        gl.store(LSE + (b * Hq + kvh * GROUP) * SQ + r_s, lse, mask=r_s < GROUP * SQ)


@gluon.jit
def decode_fp8_kernel(Q, K, V, QD, KD, VD, O, LSE, O_PART, LSE_PART, SEQLENS, TABLE, LEFTPAD,
                      stride_qb, stride_qs, stride_qh, stride_kr, stride_kt, stride_kh,
                      stride_vr, stride_vt, stride_vh, stride_ob, stride_os, stride_oh,
                      table_stride, n_splits, Hq, Hkv, qk_scale_log2,
                      SQ: gl.constexpr, GROUP: gl.constexpr, D: gl.constexpr, DV: gl.constexpr,
                      NQ: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr, PAGE: gl.constexpr,
                      Q_FP8: gl.constexpr, CAUSAL: gl.constexpr, SPLIT: gl.constexpr,
                      HAS_LEFTPAD: gl.constexpr):
    """Grid (n_splits, batch * kv_heads); the Triton decode_kernel's arguments and outputs
    (partials for merge_kernel where SPLIT), for E4M3 K/V with descales per (sequence, kv head)."""
    split = gl.program_id(0)
    bk = gl.program_id(1)
    b = bk // Hkv
    kvh = bk % Hkv
    Sk = gl.load(SEQLENS + b)
    if HAS_LEFTPAD:                  # the row's keys start past its padding: count from there
        start = gl.load(LEFTPAD + b).to(gl.int64)
        Sk = Sk - start.to(Sk.dtype)
        K += start * stride_kt
        V += start * stride_vt
    tiles = ((Sk + BN - 1) // BN + n_splits - 1) // n_splits        # the Triton kernel's split_bounds
    lo = gl.minimum(split * tiles * BN, Sk)
    hi = gl.minimum(lo + tiles * BN, Sk)
    n_tiles = (hi - lo + BN - 1) // BN

    ld: gl.constexpr = gl.BlockedLayout([1, 16], [4, 8], [NUM_WARPS, 1], [1, 0])     # 16 bytes a thread
    s_mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1],
                                                    instr_shape=[16, NQ, 32])
    o_mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1],
                                                    instr_shape=[16, NQ, 16])
    sl8: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8, rank=2)
    sl16: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    sl16p: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=32, element_bitwidth=16, rank=2)

    q, c = _queries(Q, QD, KD, b, kvh, Hkv, stride_qb, stride_qs, stride_qh, qk_scale_log2, SQ, GROUP, D, NQ, Q_FP8,
                    ld, s_mma)
    r_s = gl.arange(0, NQ, layout=gl.SliceLayout(0, s_mma))
    q_s = gl.allocate_shared_memory(gl.float8e4nv, [NQ, D], sl8, q)
    limit = Sk - SQ + r_s % SQ                     # causal: the last key row r's query sees

    k_s = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, BN, D], sl8)
    v_s = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, BN, DV], sl8)
    w_s = gl.allocate_shared_memory(gl.float16, [BN, DV], sl16)       # V widened to FP16
    p_s = gl.allocate_shared_memory(gl.float16, [NQ, BN], sl16p)      # P^T's operand, K-major

    table = TABLE + b * table_stride
    offs_n = gl.arange(0, BN, layout=gl.SliceLayout(1, ld))
    offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, ld))
    offs_dv = gl.arange(0, DV, layout=gl.SliceLayout(0, ld))
    k_base = K + kvh * stride_kh
    v_base = V + kvh * stride_vh
    for i in gl.static_range(STAGES - 1):
        keys = lo + i * BN + offs_n
        rows, toks = _cache_rows(table, b, keys, hi, PAGE)
        _copy_tile(k_s.index(i), k_base, rows, toks, keys, hi, stride_kr, stride_kt, offs_d)
        _copy_tile(v_s.index(i), v_base, rows, toks, keys, hi, stride_vr, stride_vt, offs_dv)
        async_copy.commit_group()
    rows, toks = _cache_rows(table, b, lo + (STAGES - 1) * BN + offs_n, hi, PAGE)

    acc = gl.zeros([DV, NQ], gl.float32, layout=o_mma)
    m_i = gl.full([NQ], _NEG_FLOOR, gl.float32, layout=gl.SliceLayout(0, s_mma))
    l_i = gl.zeros([NQ], gl.float32, layout=gl.SliceLayout(0, s_mma))
    for j in range(n_tiles):
        ahead = j + STAGES - 1
        keys = lo + ahead * BN + offs_n
        _copy_tile(k_s.index(ahead % STAGES), k_base, rows, toks, keys, hi, stride_kr, stride_kt, offs_d)
        _copy_tile(v_s.index(ahead % STAGES), v_base, rows, toks, keys, hi, stride_vr, stride_vt, offs_dv)
        async_copy.commit_group()
        rows, toks = _cache_rows(table, b, keys + BN, hi, PAGE)     # the next tile's, used next iteration
        async_copy.wait_group(STAGES - 1)
        gl.thread_barrier()
        hopper.fence_async_shared()
        cur = j % STAGES
        tile_keys = lo + j * BN + gl.arange(0, BN, layout=gl.SliceLayout(1, s_mma))
        acc, m_i, l_i = _step(k_s.index(cur), v_s.index(cur), q_s, w_s, p_s, acc, m_i, l_i, c, tile_keys, hi, limit,
                              CAUSAL, BN, NQ, ld, s_mma, o_mma)

    # the copy issued past the last tile (masked: zeros) lands in shared memory the epilogue's
    # layout conversions reuse
    async_copy.wait_group(0)
    gl.thread_barrier()
    _write(acc, m_i, l_i, O, LSE, O_PART, LSE_PART, VD, b, kvh, bk, split, n_splits, Hq, Hkv, stride_ob, stride_os,
           stride_oh, SQ, GROUP, DV, NQ, SPLIT, s_mma)
