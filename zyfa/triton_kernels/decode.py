"""Decode attention in Triton: 1-16 queries a sequence over a dense or paged KV cache.

One program per (sequence, kv head, key split). The rows of its tile are all the query
heads of the kv head's GQA group times the sequence's queries (row r = g * SQ + i: head
g of the group, query i), so each K/V tile is read once for the whole group; the rows are
padded to BLOCK_M >= 16 for tl.dot. Keys are split over programs (per sequence: its key tiles
divided evenly over the splits) when the batch alone cannot fill the GPU; each split writes its
normalized partial output and natural-log LSE in float32, and zyfa.decode_splits.merge_kernel
combines them
in split order (no atomics: the same bits every run).

Pieces, named as in attention.py:
  key rows       a key's cache row and token: dense, or through the block table (one page
                 lookup a tile where the tile lies in one page, one a page where it is whole
                 pages, one a key otherwise), read a tile ahead;
  block bounds   the split's keys [lo, hi): the unmasked part [lo, band_start) every query
                 sees, and the masked band [band_start, hi) (cache end, causal limit);
  online step    FlashAttention's running max in float32, P rounded to the dot dtype.

Causal is bottom-right as in prefill (zyfa.spec.reference.causal_limit): query i sees keys
j <= i + Sk - SQ.

Two ways through an E4M3 cache:
  FP8_DOT    (descales per (sequence, kv head)) the dots in FP8, as the prefill FP8 path runs
             them: q in E4M3 (BF16 q quantized here, a power-of-two descale a row, so the
             scaling is exact and only the E4M3 rounding is new), Q.K^T and P.V on FP8
             operands, P = 2^(y + 8) rounded to E4M3 by the exact rule against the running max
             (the spec's ref_rule "running"), the row sum over the unrounded exponentials (its sums). A split computes
             zyfa.spec.reference.fp8_attention_spec over its keys.
  widened    (otherwise: per-token descales) K/V (and q) widened to BF16 for the dots, which is
             exact (every E4M3 value is a BF16 value); their descales enter the float32 scores
             and output: per (sequence, kv head) as one factor a row, per token as a factor a
             key (K: on the score, V: on P before P.V). So the cache computes what a BF16 cache
             holding its dequantized values computes, to float32 rounding, P's BF16 rounding
             and the per-token V factor's rounding of P.
"""
import triton
import triton.language as tl

from ..spec import constants as C
from .attention import _dot, _max_nan
from .p_rules import P_EXACT, e4m3_bits_nonneg, e4m3_rne, p_fp8

_NEG_FLOOR: tl.constexpr = tl.constexpr(C.NEG_FLOOR)
_LN2: tl.constexpr = tl.constexpr(C.LN2)
_P_OFFSET: tl.constexpr = tl.constexpr(float(C.P_OFFSET_LOG2))         # P = 2^(y + 8)

# descale modes of K and V (constexpr KD_MODE / VD_MODE)
NO_DESCALE: tl.constexpr = tl.constexpr(0)     # 16-bit cache
PER_HEAD: tl.constexpr = tl.constexpr(1)       # one per (sequence, kv head), (batch, kv_heads)
PER_TOKEN: tl.constexpr = tl.constexpr(2)      # one per cached token, (rows, kv_heads, tokens)


@triton.jit
def _rounded(p, dtype: tl.constexpr, UPCAST_DOT: tl.constexpr):
    """p rounded to the dot dtype, to nearest even. Triton's interpreter truncates float32 to
    BF16, so under it (UPCAST_DOT, float32 dots) BF16's rounding is done on the bits."""
    if UPCAST_DOT and dtype == tl.bfloat16:
        bits = p.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.to(tl.float32, bitcast=True)
    return p.to(dtype)


@triton.jit
def tile_cache_rows(b, table, start_n, Sk, BLOCK_N: tl.constexpr, PAGE: tl.constexpr, PAGES_A_TILE: tl.constexpr):
    """The cache rows of keys start_n + [0, BLOCK_N): row b of a dense cache (PAGE 0), else the
    pages the block table names, keys past Sk reading page 0. PAGES_A_TILE n > 0: the tile lies
    in one page (n 1) or is n whole pages, a lookup a page; 0: a lookup a key (pages that do not
    divide the tile)."""
    offs_n = tl.arange(0, BLOCK_N)
    cols = start_n + offs_n
    # one return of one type: the compiler (unlike the interpreter) refuses branches that return
    # a scalar in one place and a tensor in another
    if PAGE == 0:
        row = b + tl.zeros_like(cols)
    elif PAGES_A_TILE == 0:
        row = tl.load(table + cols // PAGE, mask=cols < Sk, other=0)
    else:
        first = start_n // PAGE
        row = tl.load(table + first, mask=start_n < Sk, other=0) + tl.zeros_like(cols)
        for j in tl.static_range(1, PAGES_A_TILE):
            row = tl.where(offs_n >= j * PAGE, tl.load(table + first + j, mask=start_n + j * PAGE < Sk, other=0), row)
    return row


@triton.jit
def key_tokens(start_n, offs_n, PAGE: tl.constexpr, PAGES_A_TILE: tl.constexpr):
    """The tokens within their cache rows of keys start_n + offs_n (tile_cache_rows' rows)."""
    if PAGE == 0:
        return start_n + offs_n
    elif PAGES_A_TILE == 1:
        return start_n % PAGE + offs_n
    elif PAGES_A_TILE > 1:
        return offs_n % PAGE
    return (start_n + offs_n) % PAGE


@triton.jit
def split_bounds(split, n_splits, Sk, SQ: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """(lo, band_start, hi): split ``split`` of n_splits takes keys [lo, hi), whole tiles of the
    sequence's Sk keys shared out evenly; keys [lo, band_start) need no mask, [band_start, hi) do."""
    tiles = tl.cdiv(tl.cdiv(Sk, BLOCK_N), n_splits)
    lo = tl.minimum(split * tiles * BLOCK_N, Sk)
    hi = tl.minimum(lo + tiles * BLOCK_N, Sk)
    if CAUSAL:
        seen_by_all = Sk - SQ + 1                # query 0's limit + 1: every query sees keys below it
    else:
        seen_by_all = Sk
    unmasked = tl.maximum(tl.minimum(hi, seen_by_all), lo) - lo
    return lo, lo + (unmasked // BLOCK_N) * BLOCK_N, hi


@triton.jit
def _key_tile(K, V, kvh, rows, start_n, Sk, stride_kr, stride_kt, stride_kh, stride_vr, stride_vt, stride_vh,
              D: tl.constexpr, DV: tl.constexpr, BLOCK_N: tl.constexpr, PAGE: tl.constexpr,
              PAGES_A_TILE: tl.constexpr, MASKED: tl.constexpr):
    """A key tile's columns, whether each is in the sequence, its cache rows (``rows``, its
    tile_cache_rows) and tokens, and K's and V's pointers."""
    offs_n = tl.arange(0, BLOCK_N)
    cols = start_n + offs_n
    tok = key_tokens(start_n, offs_n, PAGE, PAGES_A_TILE)
    row = rows.to(tl.int64)
    k_ptrs = K + (row * stride_kr + tok * stride_kt + kvh * stride_kh)[:, None] + tl.arange(0, D)[None, :]
    v_ptrs = V + (row * stride_vr + tok * stride_vt + kvh * stride_vh)[:, None] + tl.arange(0, DV)[None, :]
    return cols, cols < Sk, row, tok, k_ptrs, v_ptrs


@triton.jit
def _load_keys(ptrs, in_seq, MASKED: tl.constexpr):
    """A tile of K or V (keys past the sequence as 0 where MASKED)."""
    if MASKED:
        return tl.load(ptrs, mask=in_seq[:, None], other=0.0)
    return tl.load(ptrs)


@triton.jit
def _decode_step(acc, l_sum, m, q, row_fac, qi, K, V, KD, VD, kvh, rows, start_n, Sk,
                 stride_kr, stride_kt, stride_kh, stride_vr, stride_vt, stride_vh, stride_dr, stride_dh,
                 SQ: tl.constexpr, D: tl.constexpr, DV: tl.constexpr, BLOCK_N: tl.constexpr,
                 PAGE: tl.constexpr, PAGES_A_TILE: tl.constexpr, KD_MODE: tl.constexpr, VD_MODE: tl.constexpr,
                 CAUSAL: tl.constexpr, MASKED: tl.constexpr, UPCAST_DOT: tl.constexpr):
    """One key tile of the online softmax; returns the updated (acc, l_sum, m)."""
    cols, in_seq, row, tok, k_ptrs, v_ptrs = _key_tile(K, V, kvh, rows, start_n, Sk, stride_kr, stride_kt,
                                                       stride_kh, stride_vr, stride_vt, stride_vh, D, DV, BLOCK_N,
                                                       PAGE, PAGES_A_TILE, MASKED)
    d_off = row * stride_dr + kvh * stride_dh + tok       # per-token descales: (rows, kv_heads, tokens)
    k = _load_keys(k_ptrs, in_seq, MASKED)
    s = _dot(q, k.to(q.dtype).T, tl.zeros([q.shape[0], BLOCK_N], tl.float32), UPCAST_DOT)
    if KD_MODE == PER_TOKEN:
        if MASKED:
            kd = tl.load(KD + d_off, mask=in_seq, other=0.0)
        else:
            kd = tl.load(KD + d_off)
        t = s * (row_fac[:, None] * kd[None, :])
    else:
        t = s * row_fac[:, None]
    if MASKED:
        valid = in_seq[None, :]
        if CAUSAL:
            valid = valid & (cols[None, :] <= qi[:, None] + (Sk - SQ))
        t = tl.where(valid, t, float("-inf"))
    m_new = tl.maximum(m, tl.max(t, 1))
    alpha = tl.exp2(m - m_new)
    p = tl.exp2(t - m_new[:, None])
    l_sum = l_sum * alpha + tl.sum(p, 1)
    if VD_MODE == PER_TOKEN:
        if MASKED:
            vd = tl.load(VD + d_off, mask=in_seq, other=0.0)
        else:
            vd = tl.load(VD + d_off)
        p = p * vd[None, :]
    v = _load_keys(v_ptrs, in_seq, MASKED)
    acc = _dot(_rounded(p, q.dtype, UPCAST_DOT), v.to(q.dtype), acc * alpha[:, None], UPCAST_DOT)
    return acc, l_sum, m_new


@triton.jit
def _fp8_step(acc, l_sum, m, q, row_fac, qi, K, V, kvh, rows, start_n, Sk,
              stride_kr, stride_kt, stride_kh, stride_vr, stride_vt, stride_vh,
              SQ: tl.constexpr, D: tl.constexpr, DV: tl.constexpr, BLOCK_N: tl.constexpr, PAGE: tl.constexpr,
              PAGES_A_TILE: tl.constexpr, CAUSAL: tl.constexpr, MASKED: tl.constexpr, UPCAST_DOT: tl.constexpr,
              HW_ROUND: tl.constexpr):
    """One key tile with FP8 dots (E4M3 q, K, V; descales per (sequence, kv head), in row_fac
    and the epilogue): the prefill FP8 path's step under the running reference, m the running
    max of the log2 scores; returns the updated (acc, l_sum, m)."""
    cols, in_seq, _, _, k_ptrs, v_ptrs = _key_tile(K, V, kvh, rows, start_n, Sk, stride_kr, stride_kt, stride_kh,
                                                   stride_vr, stride_vt, stride_vh, D, DV, BLOCK_N, PAGE,
                                                   PAGES_A_TILE, MASKED)
    k = _load_keys(k_ptrs, in_seq, MASKED)
    s = _dot(q, k.T, tl.zeros([q.shape[0], BLOCK_N], tl.float32), UPCAST_DOT)
    c = tl.broadcast_to(row_fac[:, None], s.shape)
    t = s * c
    if MASKED:
        valid = in_seq[None, :]
        if CAUSAL:
            valid = valid & (cols[None, :] <= qi[:, None] + (Sk - SQ))
        t = tl.where(valid, t, float("-inf"))
    m_new = _max_nan(m, tl.reduce(t, 1, _max_nan))
    alpha = tl.exp2(m - m_new)
    # y + 8 = t - (m - 8) in one rounding, as the prefill kernel forms exp2's argument
    y = tl.fma(s, c, -(m_new - _P_OFFSET)[:, None])
    if MASKED:
        y = tl.where(valid, y, float("-inf"))
    p = p_fp8(y, P_EXACT, HW_ROUND, Y_SHIFTED=True)
    l_sum = l_sum * alpha + tl.sum(tl.exp2(y), 1)     # spec.rules.sums_unrounded: the running exact pair
    v = _load_keys(v_ptrs, in_seq, MASKED)
    acc = tl.dot(p, v, acc=acc * alpha[:, None])
    return acc, l_sum, m_new


@triton.jit
def _key_tiles(acc, l_sum, m, q, row_fac, qi, K, V, KD, VD, b, kvh, table, rows, lo, hi, Sk,
               stride_kr, stride_kt, stride_kh, stride_vr, stride_vt, stride_vh, stride_dr, stride_dh,
               SQ: tl.constexpr, D: tl.constexpr, DV: tl.constexpr, BLOCK_N: tl.constexpr, PAGE: tl.constexpr,
               PAGES_A_TILE: tl.constexpr, KD_MODE: tl.constexpr, VD_MODE: tl.constexpr, CAUSAL: tl.constexpr,
               MASKED: tl.constexpr, UPCAST_DOT: tl.constexpr, FP8_DOT: tl.constexpr, HW_ROUND: tl.constexpr):
    """Keys [lo, hi) a tile at a time (_fp8_step or _decode_step); returns (acc, l_sum, m) and
    the page rows of the tile after hi. ``rows``: lo's tile's page rows. Each tile's rows are read
    a tile ahead and carried: read in the tile that uses them, they would keep Triton's pipeliner
    from prefetching that tile's keys over more stages."""
    for start_n in range(lo, hi, BLOCK_N):
        if FP8_DOT:
            acc, l_sum, m = _fp8_step(acc, l_sum, m, q, row_fac, qi, K, V, kvh, rows, start_n, Sk,
                                      stride_kr, stride_kt, stride_kh, stride_vr, stride_vt, stride_vh,
                                      SQ, D, DV, BLOCK_N, PAGE, PAGES_A_TILE, CAUSAL, MASKED, UPCAST_DOT, HW_ROUND)
        else:
            acc, l_sum, m = _decode_step(acc, l_sum, m, q, row_fac, qi, K, V, KD, VD, kvh, rows, start_n, Sk,
                                         stride_kr, stride_kt, stride_kh, stride_vr, stride_vt, stride_vh,
                                         stride_dr, stride_dh, SQ, D, DV, BLOCK_N, PAGE, PAGES_A_TILE,
                                         KD_MODE, VD_MODE, CAUSAL, MASKED, UPCAST_DOT)
        rows = tile_cache_rows(b, table, start_n + BLOCK_N, Sk, BLOCK_N, PAGE, PAGES_A_TILE)
    return acc, l_sum, m, rows


@triton.jit
def e4m3_rows(q, HW_ROUND: tl.constexpr):
    """(codes, descale): each row of q as E4M3 with a power-of-two descale 2^e, e the least with
    max|row| / 2^e <= 448 (zyfa.spec.kv_cache.decode_query_e4m3 is the contract). A power of two
    scales exactly, so the codes are q's values rounded once, to nearest even; an all-zero row
    takes e = -126 and codes 0."""
    x = q.to(tl.float32)
    bits = tl.max(tl.abs(x), 1).to(tl.int32, bitcast=True)
    # amax = 1.m * 2^E: 448 = 1.75 * 2^8, so e = E - 8, one more where the mantissa passes 0.75
    e = ((bits >> 23) & 0xFF) - 135 + ((bits & 0x7FFFFF) > 0x600000).to(tl.int32)
    e = tl.minimum(tl.maximum(e, -126), 126)
    descale = ((e + 127) << 23).to(tl.float32, bitcast=True)
    x = x * ((127 - e) << 23).to(tl.float32, bitcast=True)[:, None]
    if HW_ROUND:
        codes = e4m3_rne(x)
    else:
        # the interpreter's float -> fp8 casts do not round like the GPU: the magnitude's code
        # by integer arithmetic, then the sign
        mag = e4m3_bits_nonneg(tl.abs(x))
        sign = (x.to(tl.int32, bitcast=True) >> 24) & 0x80
        codes = (mag | sign).to(tl.int8)
    return codes.to(tl.float8e4nv, bitcast=True), descale


@triton.jit
def _query_factor(q, QD, KD, b, Hkv, kvh, qk_scale_log2, BLOCK_M: tl.constexpr, Q_FP8: tl.constexpr, KD_MODE: tl.constexpr,
                  FP8_DOT: tl.constexpr, HW_ROUND: tl.constexpr):
    """(q as the dots take it, each row's factor from raw dot products to the log2 domain);
    the per-head descales of (sequence b, kv head kvh)."""
    row_fac = tl.zeros([BLOCK_M], tl.float32) + qk_scale_log2
    if FP8_DOT:
        # the spec's factor c: (dq * dk) * scale for a coarse q descale, (dq_row * scale) * dk
        # for q's rows quantized here (its per-token form)
        if Q_FP8:
            row_fac = (tl.load(QD + b * Hkv + kvh) * tl.load(KD + b * Hkv + kvh)) * row_fac
        else:
            q, q_scale = e4m3_rows(q, HW_ROUND)
            row_fac = (q_scale * row_fac) * tl.load(KD + b * Hkv + kvh)
    else:
        if Q_FP8:
            q = q.to(tl.bfloat16)
            row_fac = row_fac * tl.load(QD + b * Hkv + kvh)
        if KD_MODE == PER_HEAD:
            row_fac = row_fac * tl.load(KD + b * Hkv + kvh)
    return q, row_fac


@triton.jit
def decode_kernel(Q, K, V, QD, KD, VD, O, LSE, O_PART, LSE_PART, SEQLENS, TABLE, LEFTPAD,
                  stride_qb, stride_qs, stride_qh, stride_kr, stride_kt, stride_kh,
                  stride_vr, stride_vt, stride_vh, stride_dr, stride_dh, stride_ob, stride_os, stride_oh,
                  table_stride, n_splits, Hq, Hkv, qk_scale_log2,
                  SQ: tl.constexpr, GROUP: tl.constexpr, D: tl.constexpr, DV: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PAGE: tl.constexpr, PAGES_A_TILE: tl.constexpr,
                  Q_FP8: tl.constexpr, KD_MODE: tl.constexpr, VD_MODE: tl.constexpr, CAUSAL: tl.constexpr,
                  SPLIT: tl.constexpr, UPCAST_DOT: tl.constexpr, HAS_LEFTPAD: tl.constexpr,
                  FP8_DOT: tl.constexpr = False, HW_ROUND: tl.constexpr = False):
    """Grid (n_splits, batch * kv_heads). q (B, SQ, Hq, D); the cache K/V (rows, tokens, Hkv, d)
    read through their strides; SEQLENS (B,) int32 the keys each sequence uses; TABLE
    (B, max_pages) int32 with PAGE > 0. QD: q's descales (B, Hkv) with Q_FP8; KD/VD by mode.
    SPLIT: write partials O_PART (B * Hkv, n_splits, GROUP * SQ, DV) and LSE_PART
    (B * Hkv, n_splits, GROUP * SQ) for merge_kernel; else the output O (B, SQ, Hq, DV) and
    LSE (B, Hq, SQ). HAS_LEFTPAD (dense caches): sequence b's keys are tokens
    [LEFTPAD[b], SEQLENS[b]) of its row, FlashAttention's cache_leftpad. FP8_DOT (E4M3 cache,
    KD_MODE = VD_MODE = PER_HEAD): the dots in FP8 (module docstring); HW_ROUND: E4M3
    roundings by the GPU's conversion (not under the interpreter)."""
    split = tl.program_id(0)
    bk = tl.program_id(1)
    b = bk // Hkv
    kvh = bk % Hkv
    Sk = tl.load(SEQLENS + b)
    if HAS_LEFTPAD:
        # the sequence's keys start past its padding: move the row's base pointers there, so
        # every bound below counts keys from the first real one
        start = tl.load(LEFTPAD + b).to(tl.int64)
        Sk = Sk - start.to(Sk.dtype)
        K += start * stride_kt
        V += start * stride_vt
        if KD_MODE == PER_TOKEN:
            KD += start
        if VD_MODE == PER_TOKEN:
            VD += start

    rows_m = tl.arange(0, BLOCK_M)
    row_ok = rows_m < GROUP * SQ
    g = rows_m // SQ
    qi = rows_m % SQ
    h = kvh * GROUP + g
    q_ptrs = Q + b * stride_qb + qi[:, None] * stride_qs + h[:, None] * stride_qh + tl.arange(0, D)[None, :]
    q = tl.load(q_ptrs, mask=row_ok[:, None], other=0.0)
    q, row_fac = _query_factor(q, QD, KD, b, Hkv, kvh, qk_scale_log2, BLOCK_M, Q_FP8, KD_MODE, FP8_DOT, HW_ROUND)

    acc = tl.zeros([BLOCK_M, DV], tl.float32)
    l_sum = tl.zeros([BLOCK_M], tl.float32)
    m = tl.zeros([BLOCK_M], tl.float32) + _NEG_FLOOR
    table = TABLE + b * table_stride
    lo, band_start, hi = split_bounds(split, n_splits, Sk, SQ, BLOCK_N, CAUSAL)
    rows = tile_cache_rows(b, table, lo, Sk, BLOCK_N, PAGE, PAGES_A_TILE)
    acc, l_sum, m, rows = _key_tiles(acc, l_sum, m, q, row_fac, qi, K, V, KD, VD, b, kvh, table, rows, lo, band_start,
                                     Sk, stride_kr, stride_kt, stride_kh, stride_vr, stride_vt, stride_vh, stride_dr,
                                     stride_dh, SQ, D, DV, BLOCK_N, PAGE, PAGES_A_TILE, KD_MODE, VD_MODE, CAUSAL, False,
                                     UPCAST_DOT, FP8_DOT, HW_ROUND)
    acc, l_sum, m, rows = _key_tiles(acc, l_sum, m, q, row_fac, qi, K, V, KD, VD, b, kvh, table, rows, band_start, hi,
                                     Sk, stride_kr, stride_kt, stride_kh, stride_vr, stride_vt, stride_vh, stride_dr,
                                     stride_dh, SQ, D, DV, BLOCK_N, PAGE, PAGES_A_TILE, KD_MODE, VD_MODE, CAUSAL, True,
                                     UPCAST_DOT, FP8_DOT, HW_ROUND)
    if FP8_DOT:
        m = m - _P_OFFSET               # P = 2^(y + 8): the LSE's reference is 8 below the max

    # epilogue; a split whose keys a row cannot see (none, or all past its causal limit)
    # leaves l_sum 0: its partial is 0 with LSE -inf, weight 0 in the merge
    seen = l_sum > 0
    l_safe = tl.where(seen, l_sum, 1.0)
    offs_dv = tl.arange(0, DV)
    if FP8_DOT:
        out = (acc * tl.load(VD + b * Hkv + kvh)) / l_safe[:, None]         # the spec's order
    else:
        out = acc / l_safe[:, None]
        if VD_MODE == PER_HEAD:
            out = out * tl.load(VD + b * Hkv + kvh)
    lse = tl.where(seen, _LN2 * (m + tl.log2(l_safe)), float("-inf"))
    if SPLIT:
        part = bk * n_splits + split
        tl.store(O_PART + (part * (GROUP * SQ) + rows_m)[:, None] * DV + offs_dv[None, :], out,
                 mask=row_ok[:, None])
        tl.store(LSE_PART + part * (GROUP * SQ) + rows_m, lse, mask=row_ok)
    else:
        o_ptrs = O + b * stride_ob + qi[:, None] * stride_os + h[:, None] * stride_oh + offs_dv[None, :]
        tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=row_ok[:, None])
        tl.store(LSE + (b * Hq + kvh * GROUP) * SQ + rows_m, lse, mask=row_ok)
