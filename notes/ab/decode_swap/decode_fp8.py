"""E4M3 decode with the FP8 dots, the keys in M: the decode kernel's FP8_DOT path transposed.

With a GQA group's query rows in M (16 rows, decode.py), Triton 3.6 runs Hopper's "FP8" dots
as FP16 mma.sync, unpacking E4M3 and gathering V a byte at a time. Here the keys are M and the
rows N: S^T = K q^T (K as stored is K-major) and O^T = V^T P^T, both E4M3 wgmmas. The arithmetic
is decode.py's _fp8_step's, transposed: the same factor c, running max, P by the exact rule
against it, row sums over the unrounded exponentials (zyfa.spec.kv_cache.decode_fp8_spec).

Grid, cache reads (dense, paged, cache_leftpad), splits and partials are decode_kernel's, so
merge_kernel combines the splits.
"""
import triton
import triton.language as tl

from .attention import _max_nan
from .decode import (PER_HEAD, _LN2, _NEG_FLOOR, _P_OFFSET, _key_tile, _load_keys, _query_factor, split_bounds,
                     tile_cache_rows)
from .p_rules import P_EXACT, p_fp8


@triton.jit
def _step(acc_t, l_sum, m, q_t, row_fac, qi, K, V, kvh, rows, start_n, Sk,
          stride_kr, stride_kt, stride_kh, stride_vr, stride_vt, stride_vh,
          SQ: tl.constexpr, D: tl.constexpr, DV: tl.constexpr, BLOCK_N: tl.constexpr, PAGE: tl.constexpr,
          PAGES_A_TILE: tl.constexpr, CAUSAL: tl.constexpr, MASKED: tl.constexpr, HW_ROUND: tl.constexpr):
    """One key tile: acc_t (DV, rows), l_sum and m (rows,) updated."""
    cols, in_seq, _, _, k_ptrs, v_ptrs = _key_tile(K, V, kvh, rows, start_n, Sk, stride_kr, stride_kt, stride_kh,
                                                   stride_vr, stride_vt, stride_vh, D, DV, BLOCK_N, PAGE,
                                                   PAGES_A_TILE, MASKED)
    k = _load_keys(k_ptrs, in_seq, MASKED)
    s_t = tl.dot(k, q_t)                                              # (keys, rows)
    c = tl.broadcast_to(row_fac[None, :], s_t.shape)
    t = s_t * c
    if MASKED:
        valid = in_seq[:, None]
        if CAUSAL:
            valid = valid & (cols[:, None] <= qi[None, :] + (Sk - SQ))
        t = tl.where(valid, t, float("-inf"))
    m_new = _max_nan(m, tl.reduce(t, 0, _max_nan))
    alpha = tl.exp2(m - m_new)
    y = tl.fma(s_t, c, -(m_new - _P_OFFSET)[None, :])                # y + 8 in one rounding, as decode.py
    if MASKED:
        y = tl.where(valid, y, float("-inf"))
    p = p_fp8(y, P_EXACT, HW_ROUND, Y_SHIFTED=True)
    l_sum = l_sum * alpha + tl.sum(tl.exp2(y), 0)
    v = _load_keys(v_ptrs, in_seq, MASKED)
    acc_t = tl.dot(tl.trans(v), p, acc=acc_t * alpha[None, :])
    return acc_t, l_sum, m_new


@triton.jit
def _tiles(acc_t, l_sum, m, q_t, row_fac, qi, K, V, b, kvh, table, rows, lo, hi, Sk,
           stride_kr, stride_kt, stride_kh, stride_vr, stride_vt, stride_vh,
           SQ: tl.constexpr, D: tl.constexpr, DV: tl.constexpr, BLOCK_N: tl.constexpr, PAGE: tl.constexpr,
           PAGES_A_TILE: tl.constexpr, CAUSAL: tl.constexpr, MASKED: tl.constexpr, HW_ROUND: tl.constexpr):
    """Keys [lo, hi) a tile at a time, each tile's page rows read a tile ahead (decode._key_tiles)."""
    for start_n in range(lo, hi, BLOCK_N):
        acc_t, l_sum, m = _step(acc_t, l_sum, m, q_t, row_fac, qi, K, V, kvh, rows, start_n, Sk, stride_kr,
                                stride_kt, stride_kh, stride_vr, stride_vt, stride_vh, SQ, D, DV, BLOCK_N, PAGE,
                                PAGES_A_TILE, CAUSAL, MASKED, HW_ROUND)
        rows = tile_cache_rows(b, table, start_n + BLOCK_N, Sk, BLOCK_N, PAGE, PAGES_A_TILE)
    return acc_t, l_sum, m, rows


@triton.jit
def decode_fp8_kernel(Q, K, V, QD, KD, VD, O, LSE, O_PART, LSE_PART, SEQLENS, TABLE, LEFTPAD,
                      stride_qb, stride_qs, stride_qh, stride_kr, stride_kt, stride_kh,
                      stride_vr, stride_vt, stride_vh, stride_ob, stride_os, stride_oh,
                      table_stride, n_splits, Hq, Hkv, qk_scale_log2,
                      SQ: tl.constexpr, GROUP: tl.constexpr, D: tl.constexpr, DV: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PAGE: tl.constexpr, PAGES_A_TILE: tl.constexpr,
                      Q_FP8: tl.constexpr, CAUSAL: tl.constexpr, SPLIT: tl.constexpr, HAS_LEFTPAD: tl.constexpr,
                      HW_ROUND: tl.constexpr):
    """decode_kernel's contract for an E4M3 cache with descales per (sequence, kv head), the
    FP8 dots: grid (n_splits, batch * kv_heads), the same arguments less the per-token ones,
    the same partials or output."""
    split = tl.program_id(0)
    bk = tl.program_id(1)
    b = bk // Hkv
    kvh = bk % Hkv
    Sk = tl.load(SEQLENS + b)
    if HAS_LEFTPAD:
        start = tl.load(LEFTPAD + b).to(tl.int64)
        Sk = Sk - start.to(Sk.dtype)
        K += start * stride_kt
        V += start * stride_vt

    rows_m = tl.arange(0, BLOCK_M)
    row_ok = rows_m < GROUP * SQ
    g = rows_m // SQ
    qi = rows_m % SQ
    h = kvh * GROUP + g
    q = tl.load(Q + b * stride_qb + qi[:, None] * stride_qs + h[:, None] * stride_qh + tl.arange(0, D)[None, :],
                mask=row_ok[:, None], other=0.0)
    q, row_fac = _query_factor(q, QD, KD, b, Hkv, kvh, qk_scale_log2, BLOCK_M, Q_FP8, PER_HEAD, True, HW_ROUND)
    q_t = tl.trans(q)

    acc_t = tl.zeros([DV, BLOCK_M], tl.float32)
    l_sum = tl.zeros([BLOCK_M], tl.float32)
    m = tl.zeros([BLOCK_M], tl.float32) + _NEG_FLOOR
    table = TABLE + b * table_stride
    lo, band_start, hi = split_bounds(split, n_splits, Sk, SQ, BLOCK_N, CAUSAL)
    rows = tile_cache_rows(b, table, lo, Sk, BLOCK_N, PAGE, PAGES_A_TILE)
    acc_t, l_sum, m, rows = _tiles(acc_t, l_sum, m, q_t, row_fac, qi, K, V, b, kvh, table, rows, lo, band_start, Sk,
                                   stride_kr, stride_kt, stride_kh, stride_vr, stride_vt, stride_vh, SQ, D, DV,
                                   BLOCK_N, PAGE, PAGES_A_TILE, CAUSAL, False, HW_ROUND)
    acc_t, l_sum, m, rows = _tiles(acc_t, l_sum, m, q_t, row_fac, qi, K, V, b, kvh, table, rows, band_start, hi, Sk,
                                   stride_kr, stride_kt, stride_kh, stride_vr, stride_vt, stride_vh, SQ, D, DV,
                                   BLOCK_N, PAGE, PAGES_A_TILE, CAUSAL, True, HW_ROUND)
    m = m - _P_OFFSET               # P = 2^(y + 8): the LSE's reference is 8 below the max

    # epilogue as decode_kernel's: a split no row sees leaves l_sum 0, LSE -inf, weight 0
    seen = l_sum > 0
    l_safe = tl.where(seen, l_sum, 1.0)
    offs_dv = tl.arange(0, DV)
    out_t = (acc_t * tl.load(VD + b * Hkv + kvh)) / l_safe[None, :]
    lse = tl.where(seen, _LN2 * (m + tl.log2(l_safe)), float("-inf"))
    if SPLIT:
        part = bk * n_splits + split
        tl.store(O_PART + (part * (GROUP * SQ) + rows_m)[None, :] * DV + offs_dv[:, None], out_t,
                 mask=row_ok[None, :])
        tl.store(LSE_PART + part * (GROUP * SQ) + rows_m, lse, mask=row_ok)
    else:
        o_ptrs = O + b * stride_ob + qi[None, :] * stride_os + h[None, :] * stride_oh + offs_dv[:, None]
        tl.store(o_ptrs, out_t.to(O.dtype.element_ty), mask=row_ok[None, :])
        tl.store(LSE + (b * Hq + kvh * GROUP) * SQ + rows_m, lse, mask=row_ok)
