"""Lab prototype (not in the package): the E4M3 decode step with the roles of the dots swapped.

The package's decode kernel (zyfa/triton_kernels/decode.py, FP8_DOT) puts a GQA group's query
rows in M (16 rows): Triton 3.6 then runs both dots as FP16 mma.sync, unpacking E4M3 and
gathering V a byte at a time (531 instructions a thread a 64-key tile at d128, notes/decode.md).
Here the keys are M and the query rows N: S^T = K q^T (K from shared memory, K-major: a native
E4M3 wgmma), O^T = V^T P^T (V^T and P^T through shared memory, E4M3 wgmma). The arithmetic is
the package's FP8_DOT step transposed (same factor, running max, exact P rule, unrounded row
sums), so the P bits are the spec's (zyfa.spec.kv_cache.decode_fp8_spec); only the P.V sums'
order inside the tensor core differs.

Dense caches, descales per (sequence, kv head), one or more key splits (partials for the
package's merge_kernel). Timed by notes/scripts/decode_swap_ab.py.
"""
import math

import torch
import triton
import triton.language as tl

from zyfa.spec.constants import LOG2E
from zyfa.triton_kernels.attention import _max_nan
from zyfa.triton_kernels.decode import (PER_HEAD, _LN2, _NEG_FLOOR, _P_OFFSET, _query_factor, merge_kernel,
                                        split_bounds)
from zyfa.triton_kernels.p_rules import P_EXACT, p_fp8


@triton.jit
def _swap_step(accT, l_sum, m, qT, row_fac, qi, K, V, b, kvh, start_n, Sk, stride_kr, stride_kt, stride_kh,
               stride_vr, stride_vt, stride_vh, SQ: tl.constexpr, D: tl.constexpr, DV: tl.constexpr,
               BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, MASKED: tl.constexpr, HW_ROUND: tl.constexpr):
    offs_n = tl.arange(0, BLOCK_N)
    cols = start_n + offs_n
    in_seq = cols < Sk
    row = b.to(tl.int64)
    k_ptrs = K + (row * stride_kr + cols * stride_kt + kvh * stride_kh)[:, None] + tl.arange(0, D)[None, :]
    v_ptrs = V + (row * stride_vr + cols * stride_vt + kvh * stride_vh)[:, None] + tl.arange(0, DV)[None, :]
    if MASKED:
        k = tl.load(k_ptrs, mask=in_seq[:, None], other=0.0)
    else:
        k = tl.load(k_ptrs)
    st = tl.dot(k, qT)                                       # (BLOCK_N keys, BLOCK_M rows)
    c = tl.broadcast_to(row_fac[None, :], st.shape)
    t = st * c
    if MASKED:
        valid = in_seq[:, None]
        if CAUSAL:
            valid = valid & (cols[:, None] <= qi[None, :] + (Sk - SQ))
        t = tl.where(valid, t, float("-inf"))
    m_new = _max_nan(m, tl.reduce(t, 0, _max_nan))
    alpha = tl.exp2(m - m_new)
    y = tl.fma(st, c, -(m_new - _P_OFFSET)[None, :])
    if MASKED:
        y = tl.where(valid, y, float("-inf"))
    p = p_fp8(y, P_EXACT, HW_ROUND, Y_SHIFTED=True)
    l_sum = l_sum * alpha + tl.sum(tl.exp2(y), 0)
    if MASKED:
        v = tl.load(v_ptrs, mask=in_seq[:, None], other=0.0)
    else:
        v = tl.load(v_ptrs)
    accT = tl.dot(tl.trans(v), p, acc=accT * alpha[None, :])   # (DV, BLOCK_M)
    return accT, l_sum, m_new


@triton.jit
def swap_decode_kernel(Q, K, V, QD, KD, VD, O, LSE, O_PART, LSE_PART, SEQLENS,
                       stride_qb, stride_qs, stride_qh, stride_kr, stride_kt, stride_kh,
                       stride_vr, stride_vt, stride_vh, stride_ob, stride_os, stride_oh,
                       n_splits, Hq, Hkv, qk_scale_log2,
                       SQ: tl.constexpr, GROUP: tl.constexpr, D: tl.constexpr, DV: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, Q_FP8: tl.constexpr, CAUSAL: tl.constexpr,
                       SPLIT: tl.constexpr, HW_ROUND: tl.constexpr):
    split = tl.program_id(0)
    bk = tl.program_id(1)
    b = bk // Hkv
    kvh = bk % Hkv
    Sk = tl.load(SEQLENS + b)
    rows_m = tl.arange(0, BLOCK_M)
    row_ok = rows_m < GROUP * SQ
    g = rows_m // SQ
    qi = rows_m % SQ
    h = kvh * GROUP + g
    q = tl.load(Q + b * stride_qb + qi[:, None] * stride_qs + h[:, None] * stride_qh + tl.arange(0, D)[None, :],
                mask=row_ok[:, None], other=0.0)
    q, row_fac = _query_factor(q, QD, KD, b, Hkv, kvh, qk_scale_log2, BLOCK_M, Q_FP8, PER_HEAD, True, HW_ROUND)
    qT = tl.trans(q)
    accT = tl.zeros([DV, BLOCK_M], tl.float32)
    l_sum = tl.zeros([BLOCK_M], tl.float32)
    m = tl.zeros([BLOCK_M], tl.float32) + _NEG_FLOOR
    lo, band_start, hi = split_bounds(split, n_splits, Sk, SQ, BLOCK_N, CAUSAL)
    for start_n in range(lo, band_start, BLOCK_N):
        accT, l_sum, m = _swap_step(accT, l_sum, m, qT, row_fac, qi, K, V, b, kvh, start_n, Sk, stride_kr, stride_kt,
                                    stride_kh, stride_vr, stride_vt, stride_vh, SQ, D, DV, BLOCK_N, CAUSAL, False,
                                    HW_ROUND)
    for start_n in range(band_start, hi, BLOCK_N):
        accT, l_sum, m = _swap_step(accT, l_sum, m, qT, row_fac, qi, K, V, b, kvh, start_n, Sk, stride_kr, stride_kt,
                                    stride_kh, stride_vr, stride_vt, stride_vh, SQ, D, DV, BLOCK_N, CAUSAL, True,
                                    HW_ROUND)
    m = m - _P_OFFSET
    seen = l_sum > 0
    l_safe = tl.where(seen, l_sum, 1.0)
    offs_dv = tl.arange(0, DV)
    outT = (accT * tl.load(VD + b * Hkv + kvh)) / l_safe[None, :]
    lse = tl.where(seen, _LN2 * (m + tl.log2(l_safe)), float("-inf"))
    if SPLIT:
        part = bk * n_splits + split
        tl.store(O_PART + (part * (GROUP * SQ) + rows_m)[None, :] * DV + offs_dv[:, None], outT, mask=row_ok[None, :])
        tl.store(LSE_PART + part * (GROUP * SQ) + rows_m, lse, mask=row_ok)
    else:
        o_ptrs = O + b * stride_ob + qi[None, :] * stride_os + h[None, :] * stride_oh + offs_dv[:, None]
        tl.store(o_ptrs, outT.to(O.dtype.element_ty), mask=row_ok[None, :])
        tl.store(LSE + (b * Hq + kvh * GROUP) * SQ + rows_m, lse, mask=row_ok)


def swap_decode(q, k_cache, v_cache, cache_seqlens, k_descale, v_descale, q_descale=None, causal=False,
                splits=1, block_n=128, num_warps=4, num_stages=3, softmax_scale=None, hw_round=True):
    """Dense E4M3 cache, descales (batch, kv_heads); returns (out, lse) as triton_decode does."""
    B, Sq, Hq, D = q.shape
    Hkv, Dv = k_cache.shape[2], v_cache.shape[-1]
    group = Hq // Hkv
    rows = group * Sq
    dev = q.device
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    out = torch.empty(B, Sq, Hq, Dv, dtype=torch.bfloat16, device=dev)
    lse = torch.empty(B, Hq, Sq, dtype=torch.float32, device=dev)
    if splits > 1:
        o_part = torch.empty(B * Hkv, splits, rows, Dv, dtype=torch.float32, device=dev)
        lse_part = torch.empty(B * Hkv, splits, rows, dtype=torch.float32, device=dev)
    else:
        o_part = lse_part = lse
    kd = k_descale.float().contiguous()
    vd = v_descale.float().contiguous()
    qd = q_descale.float().contiguous() if q_descale is not None else lse
    swap_decode_kernel[(splits, B * Hkv)](
        q, k_cache, v_cache, qd, kd, vd, out, lse, o_part, lse_part, cache_seqlens,
        q.stride(0), q.stride(1), q.stride(2), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), out.stride(0), out.stride(1), out.stride(2),
        splits, Hq, Hkv, scale * LOG2E, SQ=Sq, GROUP=group, D=D, DV=Dv,
        BLOCK_M=max(16, triton.next_power_of_2(rows)), BLOCK_N=block_n, Q_FP8=q_descale is not None, CAUSAL=causal,
        SPLIT=splits > 1, HW_ROUND=hw_round, num_warps=num_warps, num_stages=num_stages)
    if splits > 1:
        merge_kernel[(B * Hkv * rows,)](o_part, lse_part, out, lse, splits, Hq, Hkv, out.stride(0), out.stride(1),
                                        out.stride(2), SQ=Sq, GROUP=group, DV=Dv,
                                        SPLITS=triton.next_power_of_2(splits), num_warps=1)
    return out, lse
