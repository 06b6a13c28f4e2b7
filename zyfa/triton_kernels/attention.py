"""Causal/non-causal prefill attention in Triton, BF16/FP16 and FP8 (E4M3), one kernel.

Pieces, named as on every zyfa path:
  block bounds   which key blocks a query tile needs: the unmasked off-band part
                 [0, band_start) and the masked diagonal band [band_start, band_end);
  online step    one key block: scores, mask (band only), reference, P, P.V, rescale;
  epilogue       out = total * dv / l, LSE = ln2 * (A + log2 l - P offset).

FP8 follows zyfa.spec.reference.fp8_attention_spec: per-block references, each block's
P.V in a fresh accumulator added into the float32 total with its factor (two-level
accumulation), row sum over the rounded P. BF16 is FlashAttention's running max.
Query tiles are launched heaviest first (last tiles of the causal triangle).
"""
import triton
import triton.language as tl

from ..spec import constants as C
from ..spec.rules import REF_RULES
from .int8_grid import grid_factor, grid_max, shifted_addend
from .p_rules import P_EXACT, p_fp8

REF_RULE_IDS = {name: i for i, name in enumerate(REF_RULES)}    # the kernel's REF_RULE constexpr
REF_BLOCK: tl.constexpr = tl.constexpr(REF_RULE_IDS["block"])
REF_RUNNING: tl.constexpr = tl.constexpr(REF_RULE_IDS["running"])
REF_BLOCK_POW2: tl.constexpr = tl.constexpr(REF_RULE_IDS["block_pow2"])

_NEG_FLOOR: tl.constexpr = tl.constexpr(C.NEG_FLOOR)
_RESCALE_THRESHOLD: tl.constexpr = tl.constexpr(C.RESCALE_THRESHOLD)
_P_OFFSET: tl.constexpr = tl.constexpr(float(C.P_OFFSET_LOG2))         # P = 2^(y + 8)
_LN2: tl.constexpr = tl.constexpr(C.LN2)


@triton.jit
def _max_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _negated(x):
    """-x for FP8 x, exactly: the sign bit flipped."""
    return (x.to(tl.uint8, bitcast=True) ^ 0x80).to(x.dtype, bitcast=True)


@triton.jit
def _dot(a, b, acc, UPCAST: tl.constexpr):
    """a @ b + acc; UPCAST feeds float32 operands (Triton's interpreter multiplies bf16 as raw bits)."""
    if UPCAST:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc=acc)
    return tl.dot(a, b, acc=acc)


@triton.jit
def wgmma_key_order(p):
    """P's columns reordered within each group of 16 keys: new key 16g + 4t + 2a + b is old key
    16g + 8a + 2t + b. A thread of Hopper's wgmma accumulator holds keys 2t, 2t+1, 2t+8, 2t+9
    of a group, and the 8-bit A operand wants 4t..4t+3: in this order Triton passes P from one
    to the other without shuffles (V^T's keys are stored in the same order, launch.transposed_v)."""
    return p.reshape(p.shape[0], p.shape[1] // 16, 2, 4, 2).permute(0, 1, 3, 2, 4).reshape(p.shape[0], p.shape[1])


@triton.jit
def block_bounds(start_m, Sq, Sk, win_left, win_right, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 CAUSAL: tl.constexpr, WINDOW: tl.constexpr):
    """(lo, left_end, band_start, band_end): the key blocks a query tile reads, [lo, band_end),
    in three parts: the masked left band [lo, left_end) (sliding window's lower edge), the
    unmasked off-band part [left_end, band_start) and the masked diagonal band
    [band_start, band_end). Blocks outside [lo, band_end) are never loaded.

    Bottom-right aligned (zyfa.spec.reference.key_limits), o = Sk - Sq: CAUSAL masks keys
    j > i + o + win_right (causal: win_right 0), WINDOW keys j < i + o - win_left.
    """
    full_end = (Sk // BLOCK_N) * BLOCK_N
    if CAUSAL:
        first_row_limit = start_m + (Sk - Sq) + win_right + 1     # keys below this are seen by every row
        band_start = tl.minimum((first_row_limit // BLOCK_N) * BLOCK_N, full_end)
        band_end = tl.minimum(start_m + BLOCK_M + (Sk - Sq) + win_right, Sk)
    else:
        band_start = full_end
        band_end = Sk
    if WINDOW:
        first_key = tl.maximum(start_m + (Sk - Sq) - win_left, 0)                  # the tile's first row's
        lo = tl.minimum((first_key // BLOCK_N) * BLOCK_N, band_start)
        last_first = tl.maximum(start_m + BLOCK_M - 1 + (Sk - Sq) - win_left, 0)   # its last row's first key
        left_end = tl.minimum(tl.maximum(tl.cdiv(last_first, BLOCK_N) * BLOCK_N, lo), band_start)
    else:
        lo = 0
        left_end = 0
    return lo, left_end, band_start, band_end


@triton.jit
def _scores(q, q_tail, k_desc, k_tail_desc, tb, key0, kvh, D: tl.constexpr, D_TAIL: tl.constexpr,
            BLOCK_N: tl.constexpr, UPCAST_DOT: tl.constexpr, QK_INT8: tl.constexpr):
    """S = Q K^T of the key block whose first key is row ``key0`` of K (float32; Dqk 192 in two
    parts, the tail through its own descriptor)."""
    k = k_desc.load([tb, key0, kvh, 0]).reshape(BLOCK_N, D)
    if QK_INT8:                    # exact integers (|S| < 2^22 for head dims <= 256): exact in float32
        s = tl.dot(q, k.T, out_dtype=tl.int32)
        if D_TAIL > 0:
            k_tail = k_tail_desc.load([tb, key0, kvh, D]).reshape(BLOCK_N, D_TAIL)
            s = tl.dot(q_tail, k_tail.T, acc=s, out_dtype=tl.int32)
        s = s.to(tl.float32)
    else:
        s = _dot(q, k.T, tl.zeros([q.shape[0], BLOCK_N], tl.float32), UPCAST_DOT)
        if D_TAIL > 0:
            k_tail = k_tail_desc.load([tb, key0, kvh, D]).reshape(BLOCK_N, D_TAIL)
            s = _dot(q_tail, k_tail.T, s, UPCAST_DOT)
    return s


@triton.jit
def _fold_block(total, l_sum, A, A_new, pv, l_blk, beta, D_TAIL: tl.constexpr):
    """The block's P.V and row sums folded into the float32 total with their factor beta.
    d128: rescale the total only when some row's reference moved (with block references, only
    when a block max passes A by the threshold), otherwise one FMA per element; MLA: always
    (alpha is exactly 1 where A stays), the CTA-wide test cost 7% there."""
    if D_TAIL > 0:
        moved = True
    else:
        moved = tl.max(A_new - A, 0) > 0
    if moved:
        alpha = tl.exp2(A - A_new)
        total = total * alpha[:, None]
        l_sum = l_sum * alpha
    return total + pv * beta[:, None], l_sum + l_blk * beta


@triton.jit
def _online_step(total, l_sum, A, q, q_tail, row_fac, k_desc, k_tail_desc, v_desc, kd_ptrs,
                 tb, v_tb, kvh, k_off, v_off, start_n, offs_m, offs_n, Sq, Sk, win_left, win_right,
                 IS_FP8: tl.constexpr, PER_TOKEN_QK: tl.constexpr, P_RULE: tl.constexpr,
                 REF_RULE: tl.constexpr, CAUSAL: tl.constexpr, WINDOW: tl.constexpr, MASKED: tl.constexpr,
                 D: tl.constexpr, D_TAIL: tl.constexpr, DV: tl.constexpr, BLOCK_N: tl.constexpr,
                 UPCAST_DOT: tl.constexpr, HW_ROUND: tl.constexpr, WGMMA_KEY_ORDER: tl.constexpr,
                 QK_INT8: tl.constexpr):
    """One key block of the online softmax; returns the updated (total, l_sum, A).

    Loads go through tensor descriptors (TMA on Hopper): rows past the tensor read as zeros;
    ``tb`` / ``v_tb`` are the K and V descriptors' batch coordinates and ``k_off`` / ``v_off``
    what to add to ``start_n`` for the block's first key in K and V (0 but in packed batches,
    whose keys past Sk are the next sequence's and masked, and paged ones, whose block lies in
    one page; FP8 V^T's inner coordinate stays a multiple of 16 keys, as TMA wants).
    """
    cols = start_n + offs_n
    s = _scores(q, q_tail, k_desc, k_tail_desc, tb, k_off + start_n, kvh, D, D_TAIL, BLOCK_N, UPCAST_DOT, QK_INT8)
    # c: raw dot products to the log2 domain (FP8: the spec's c, per row or per row and key)
    if PER_TOKEN_QK:
        kd = tl.load(kd_ptrs + cols, mask=cols < Sk, other=0.0)
        c = row_fac[:, None] * kd[None, :]
    else:
        c = tl.broadcast_to(row_fac[:, None], s.shape)
    if MASKED:
        valid = cols[None, :] < Sk
        if CAUSAL:
            valid = valid & (cols[None, :] <= offs_m[:, None] + (Sk - Sq) + win_right)
        if WINDOW:
            valid = valid & (cols[None, :] >= offs_m[:, None] + (Sk - Sq) - win_left)
    if IS_FP8 and not PER_TOKEN_QK and not QK_INT8:
        # FP8 with one c > 0 for the row (Q's signs flipped otherwise): rounding is
        # monotone, so max(S c) = max(S) c bit for bit, without a multiply a score (+4% on
        # the H200; BF16, which needs t for exp2 anyway, measured 2% slower this way)
        s_max = s
        if MASKED:
            s_max = tl.where(valid, s, float("-inf"))
        ms = tl.reduce(s_max, 1, _max_nan)
        m = _max_nan(tl.where(ms == float("-inf"), float("-inf"), ms * row_fac), _NEG_FLOOR)
    else:
        if QK_INT8:                     # the exact products' max (float64) onto M |c|'s grid
            c = grid_factor(c)
            t = s.to(tl.float64) * c.to(tl.float64)
        else:
            t = s * c
        if MASKED:
            t = tl.where(valid, t, float("-inf"))
        m = tl.reduce(t, 1, _max_nan)
        if QK_INT8:                     # the grid step, then the floor (int8_grid.grid_max)
            offset, X, m = grid_max(m, c)
        else:
            m = _max_nan(m, _NEG_FLOOR)

    if IS_FP8:
        # V is stored transposed (Dv x Sk): FP8 wgmma wants both operands K-major
        v = v_desc.load([v_tb, kvh, 0, v_off + start_n]).reshape(DV, BLOCK_N).T
        if REF_RULE == REF_RUNNING:
            A_new = _max_nan(A, m)
            r = A_new
        else:
            A_new = tl.where(m > A + _RESCALE_THRESHOLD, m, A)
            if REF_RULE == REF_BLOCK:
                r = m
            else:
                r = A_new - tl.floor(A_new - m)
        beta = tl.exp2(r - A_new)
        # y = t - r in one rounding (t - r rounds twice); exp2 takes y + 8, which the exact
        # rule gets from the same FFMA (+3% on the H200: one FADD a score fewer)
        if P_RULE == P_EXACT and QK_INT8 and REF_RULE == REF_BLOCK:
            y = tl.fma(s, c, shifted_addend(offset, X)[:, None])
        elif P_RULE == P_EXACT:
            y = tl.fma(s, c, -(r - _P_OFFSET)[:, None])
        else:
            y = tl.fma(s, c, -r[:, None])
        if MASKED:
            y = tl.where(valid, y, float("-inf"))
        p = p_fp8(y, P_RULE, HW_ROUND, Y_SHIFTED=P_RULE == P_EXACT)
        if REF_RULE == REF_RUNNING and P_RULE == P_EXACT:   # spec.rules.sums_unrounded: FlashAttention's sums
            l_blk = tl.sum(tl.exp2(y), 1)
        else:
            l_blk = tl.sum(p.to(tl.float32), 1)    # on the ALUs: the tensor-core way measured slower
        if WGMMA_KEY_ORDER:
            p = wgmma_key_order(p)
        pv = tl.dot(p, v)                       # fresh accumulator: two-level accumulation
        total, l_sum = _fold_block(total, l_sum, A, A_new, pv, l_blk, beta, D_TAIL)
    else:
        v = v_desc.load([v_tb, v_off + start_n, kvh, 0]).reshape(BLOCK_N, DV)
        A_new = _max_nan(A, m)
        alpha = tl.exp2(A - A_new)
        p = tl.exp2(t - A_new[:, None])
        l_sum = l_sum * alpha + tl.sum(p, 1)
        total = _dot(p.to(v.dtype), v, total * alpha[:, None], UPCAST_DOT)
    return total, l_sum, A_new


@triton.jit
def _block_offsets(tb, k_off, v_off, start_n, page, PAGE: tl.constexpr, IS_FP8: tl.constexpr):
    """(V's batch coordinate, K's and V's offsets to add to start_n) of the key block at
    ``start_n``: as given, or (PAGE > 0) from ``page``, the page the block lies in. The pool
    is K (and BF16 V) as one batch-1 run of pages, FP8 V^T page by page (pages, Hkv, Dv, PAGE)."""
    if PAGE > 0:
        within = start_n % PAGE
        k_off = page * PAGE + within - start_n
        if IS_FP8:
            return page, k_off, within - start_n
        return tb, k_off, k_off
    return tb, k_off, v_off


@triton.jit
def attention_fwd_kernel(
        q_desc, q_tail_desc, k_desc, k_tail_desc, v_desc, o_desc, LSE, QD, KD, VD,
        Sq, Sk, Hq, Hkv, qk_scale_log2, O, CU_Q, K_START, K_LEN, V_START, o_row_stride, lse_head_stride,
        BLOCK_TABLE, block_table_stride, win_left, win_right,
        IS_FP8: tl.constexpr, PER_TOKEN_QK: tl.constexpr, P_RULE: tl.constexpr,
        REF_RULE: tl.constexpr, CAUSAL: tl.constexpr,
        D: tl.constexpr, D_TAIL: tl.constexpr, DV: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, UPCAST_DOT: tl.constexpr, HW_ROUND: tl.constexpr = False,
        WGMMA_KEY_ORDER: tl.constexpr = False, VARLEN: tl.constexpr = False, PAGE: tl.constexpr = 0,
        QK_INT8: tl.constexpr = False, WINDOW: tl.constexpr = False):
    """Grid (query tiles, batch * heads). q/k/o descriptors are 4-D (B, S, H, D) with
    blocks (1, BLOCK, 1, D); v is (B, Sk, Hkv, Dv), or (B, Hkv, Dv, Sk) for FP8.

    VARLEN: a packed batch. The descriptors view the packed tensors as batch 1; sequence b's
    queries start at CU_Q[b] (CU_Q[b + 1] - CU_Q[b] of them), its keys at K_START[b] (K_LEN[b]
    of them) in K and at V_START[b] in V; O (total_q, Hq, DV) with row stride o_row_stride and
    LSE (Hq, total_q) are written through masked pointers (a tile's rows past its sequence
    belong to the next). Per-token descales are not packed (flash_attn_varlen_func refuses them).
    QK_INT8 (with IS_FP8): q and k are int8, their dot products int32 (the INT8 Q.K^T mode).
    PAGE > 0 (with VARLEN): K/V are a paged cache of PAGE-key pages, sequence b's in row b of
    BLOCK_TABLE (row stride block_table_stride); PAGE is a multiple of BLOCK_N."""
    # query tiles vary fastest: the programs running together share one head's K/V in L2
    bh = tl.program_id(1)
    b = bh // Hq
    h = bh % Hq
    kvh = h // (Hq // Hkv)
    if VARLEN:
        tb = 0
        q_off = tl.load(CU_Q + b)
        Sq = tl.load(CU_Q + b + 1) - q_off
        k_off = tl.load(K_START + b)
        v_off = tl.load(V_START + b)
        Sk = tl.load(K_LEN + b)
    else:
        tb = b
        q_off = 0
        k_off = 0
        v_off = 0
    num_m = tl.cdiv(Sq, BLOCK_M)
    m_block = num_m - 1 - tl.program_id(0)      # heaviest (last) query tiles first
    if VARLEN:
        if m_block < 0:                         # a shorter sequence than the grid's longest
            return
    start_m = m_block * BLOCK_M

    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_dv = tl.arange(0, DV)
    row_ok = offs_m < Sq

    q = q_desc.load([tb, q_off + start_m, h, 0]).reshape(BLOCK_M, D)
    if D_TAIL > 0:
        q_tail = q_tail_desc.load([tb, q_off + start_m, h, D]).reshape(BLOCK_M, D_TAIL)
    else:
        q_tail = q

    q, q_tail, row_fac, kd_ptrs = _row_factor(q, q_tail, QD, KD, b, h, kvh, Sq, Sk, Hq, Hkv, qk_scale_log2, offs_m,
                                              row_ok, IS_FP8, PER_TOKEN_QK, QK_INT8, BLOCK_M)

    total = tl.zeros([BLOCK_M, DV], tl.float32)
    l_sum = tl.zeros([BLOCK_M], tl.float32)
    A = tl.zeros([BLOCK_M], tl.float32) + _NEG_FLOOR

    lo_0, left_end, band_start, band_end = block_bounds(start_m, Sq, Sk, win_left, win_right, BLOCK_M, BLOCK_N,
                                                         CAUSAL, WINDOW)
    table = BLOCK_TABLE + b * block_table_stride
    # the window's masked left band (WINDOW only), the unmasked blocks, the masked diagonal band
    for part in tl.static_range(3):
        if WINDOW or part > 0:
            if part == 0:
                lo = lo_0
                hi = left_end
            elif part == 1:
                lo = left_end
                hi = band_start
            else:
                lo = band_start
                hi = band_end
            # a paged cache: each block's page read one block ahead (loop-carried), so that the TMA
            # coordinates come from no load in the loop and K/V are prefetched as deep as for
            # contiguous keys (a load in the loop cost the pipeliner a stage)
            if PAGE > 0:
                next_page = tl.load(table + lo // PAGE, mask=lo < hi, other=0)
            else:
                next_page = 0
            for start_n in range(lo, hi, BLOCK_N):
                page = next_page
                if PAGE > 0:
                    next_page = tl.load(table + (start_n + BLOCK_N) // PAGE, mask=start_n + BLOCK_N < hi, other=0)
                v_tb, kn, vn = _block_offsets(tb, k_off, v_off, start_n, page, PAGE, IS_FP8)
                total, l_sum, A = _online_step(total, l_sum, A, q, q_tail, row_fac, k_desc, k_tail_desc, v_desc,
                                               kd_ptrs, tb, v_tb, kvh, kn, vn, start_n, offs_m, offs_n, Sq, Sk,
                                               win_left, win_right, IS_FP8, PER_TOKEN_QK, P_RULE, REF_RULE, CAUSAL,
                                               WINDOW, part != 1,
                                               D, D_TAIL, DV, BLOCK_N, UPCAST_DOT, HW_ROUND,
                                               WGMMA_KEY_ORDER, QK_INT8)

    _store_tile(total, l_sum, A, VD, O, o_desc, LSE, b, h, kvh, Hq, Hkv, Sq, q_off, start_m, offs_m, offs_dv, row_ok,
                o_row_stride, lse_head_stride, IS_FP8, VARLEN, BLOCK_M, DV)


@triton.jit
def _row_factor(q, q_tail, QD, KD, b, h, kvh, Sq, Sk, Hq, Hkv, qk_scale_log2, offs_m, row_ok,
                IS_FP8: tl.constexpr, PER_TOKEN_QK: tl.constexpr, QK_INT8: tl.constexpr, BLOCK_M: tl.constexpr):
    """(q, q_tail, row_fac, kd_ptrs): the factor from raw dot products to the log2 domain, per
    row (per-token: the row's, times each key's from kd_ptrs); a negative per-head factor flips
    Q's signs instead (S -> -S exactly, c -> -c, y unchanged)."""
    if IS_FP8 and PER_TOKEN_QK:
        qd = tl.load(QD + (b * Hq + h) * Sq + offs_m, mask=row_ok, other=0.0)
        row_fac = qd * qk_scale_log2
        kd_ptrs = KD + (b * Hkv + kvh) * Sk
    elif IS_FP8:
        scale = tl.load(QD + b * Hkv + kvh) * tl.load(KD + b * Hkv + kvh) * qk_scale_log2
        if not QK_INT8:                 # (int8 S takes t = S c: a negative c needs nothing)
            if scale < 0:
                q = _negated(q)
                q_tail = _negated(q_tail)
                scale = -scale
        row_fac = tl.zeros([BLOCK_M], tl.float32) + scale
        kd_ptrs = KD
    else:
        row_fac = tl.zeros([BLOCK_M], tl.float32) + qk_scale_log2
        kd_ptrs = KD
    return q, q_tail, row_fac, kd_ptrs


@triton.jit
def _store_tile(total, l_sum, A, VD, O, o_desc, LSE, b, h, kvh, Hq, Hkv, Sq, q_off, start_m, offs_m, offs_dv, row_ok,
                o_row_stride, lse_head_stride, IS_FP8: tl.constexpr, VARLEN: tl.constexpr, BLOCK_M: tl.constexpr,
                DV: tl.constexpr):
    """The epilogue: out = total / l (FP8: times V's descales) and the natural-log LSE, stored
    (packed batches through masked pointers: a tile's rows past its sequence are the next one's)."""
    out = total / l_sum[:, None]
    p_offset = 0.0
    if IS_FP8:
        vd = tl.load(VD + (b * Hkv + kvh) * DV + offs_dv)
        out = out * vd[None, :]
        p_offset = _P_OFFSET
    lse = _LN2 * (A + tl.log2(l_sum) - p_offset)
    if VARLEN:
        rows = (q_off + offs_m).to(tl.int64)
        tl.store(O + rows[:, None] * o_row_stride + h * DV + offs_dv[None, :], out.to(O.dtype.element_ty),
                 mask=row_ok[:, None])
        tl.store(LSE + h * lse_head_stride + rows, lse, mask=row_ok)
    else:
        o_desc.store([b, start_m, h, 0], out.to(o_desc.dtype).reshape(1, BLOCK_M, 1, DV))
        tl.store(LSE + (b * Hq + h) * Sq + offs_m, lse, mask=row_ok)
