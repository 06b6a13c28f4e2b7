"""Reference attention: float64 ground truth and the bit-level blockwise FP8 spec.

Layouts follow FlashAttention: q (batch, seqlen_q, heads, head_dim), k/v
(batch, seqlen_k, kv_heads, head_dim[_v]); query heads are grouped
consecutively onto kv heads (head h reads kv head h // (heads // kv_heads)).

Masks are aligned bottom-right (``key_limits``): with the offset o = seqlen_k - seqlen_q,
causal query i sees keys j <= i + o; a sliding window (left, right), FlashAttention's
``window_size`` (-1: unbounded; causal fixes right at 0), keys i + o - left <= j <= i + o + right.
Key blocks no row sees are skipped, which for a row that sees none of a block's keys is
exactly what processing the block would do (its P are 0 and its reference stays).

``fp8_attention_spec`` is the contract every FP8 kernel is held to. It runs the
blockwise algorithm (docs/algorithm.md) over key blocks of ``block_n`` in ascending
order, for all query rows at once (the algorithm is row-wise, so query tiling
does not change it):

  c   = (dq * dk) * (softmax_scale * log2 e)   per-head descales: one float32 per (batch, head)
        (dq * (softmax_scale * log2 e)) * dk    per-token descales: per (row, key)
  t   = (q8 . k8) * c                                        float32
  m_j = rowmax of t over block j (masked entries are -inf)
        INT8 Q.K^T: c with two low bits cleared, m_j the exact products' max rounded up onto a
        grid (spec.int8_grid; the kernels' y, P codes and all)
  A   = accumulator reference, updated lazily: A <- m_j where m_j > A + threshold
  r_j = the block's P reference (ref_rule):
          block      r_j = m_j
          running    r_j = M (running max, updated every block; A follows it)
          block_pow2 r_j = A - floor(A - m_j)   (factor 2^(r_j - A) is a power of two)
  y   = fma(q8 . k8, c, -r_j)        one rounding (two when fused_fma=False: t - r_j)
  P_j = E4M3 bits of 2^(y + 8) under p_rule (zyfa.spec.rules.p_bits)
  l  <- l * 2^(A_old - A) + sum(P_j)                * 2^(r_j - A)
        (running with the exact rule: the sum of 2^(y + 8) before rounding, rules.sums_unrounded)
  O  <- O * 2^(A_old - A) + (P_j @ v8)              * 2^(r_j - A)
  out = O * dv / l,   lse = ln(2) * (A + log2(l) - 8)

The row sum is over the *rounded* P, so the output is a convex combination of
the (dequantized) V rows (but for the running exact pair: FlashAttention's sums). Sums of products are taken in float64; the kernels
accumulate in float32 and differ from the spec by that ordering noise only.
"""
from __future__ import annotations

import math

import torch

from .constants import KEY_BLOCK, LOG2E, NEG_FLOOR, P_OFFSET_LOG2, RESCALE_THRESHOLD
from .descales import is_per_token, normalize_descales, row_factor
from .e4m3 import e4m3_decode, e4m3_encode_nonneg, fma32
from .int8_grid import grid_factor, grid_max, grid_offset, y_shifted
from .rules import DEFAULT_P_RULE, DEFAULT_REF_RULE, check_rules, p_bits, sums_unrounded


def _expand_kv(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, S, Hkv, D) -> (B, Hq, S, D) by consecutive grouping."""
    group = heads // x.shape[2]
    return x.permute(0, 2, 1, 3).repeat_interleave(group, dim=1)


def confined_values(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(v with its non-finite elements zeroed, whether each key (row of v) had one). A key's
    NaN or Inf reaches the query rows that see the key and no other: a masked key's weight is
    0, and 0 * NaN must not carry it to rows that cannot see it."""
    finite = torch.isfinite(v)
    return torch.where(finite, v, torch.zeros((), dtype=v.dtype, device=v.device)), ~finite.all(-1)


def causal_limit(seqlen_q: int, seqlen_k: int, device=None) -> torch.Tensor:
    """Last key index each query row may see (bottom-right alignment), shape (Sq,)."""
    return torch.arange(seqlen_q, device=device) + (seqlen_k - seqlen_q)


NO_WINDOW = (-1, -1)


def window_first(seqlen_q: int, seqlen_k: int, left: int, device=None) -> torch.Tensor:
    """First key index each query row may see under a sliding window reaching ``left`` keys
    back from the row's diagonal key (-1: unbounded), shape (Sq,); may be past the last key
    only for rows that see no key at all."""
    if left < 0:
        return torch.zeros(seqlen_q, dtype=torch.long, device=device)
    return (causal_limit(seqlen_q, seqlen_k, device) - left).clamp(min=0)


def key_limits(seqlen_q: int, seqlen_k: int, causal: bool, window=NO_WINDOW, device=None):
    """(first, last): the key range [first[i], last[i]] query row i sees, shape (Sq,) each.
    ``window`` (left, right) as FlashAttention's window_size; causal means right = 0."""
    left, right = window
    right = 0 if causal else right
    first = window_first(seqlen_q, seqlen_k, left, device)
    if right < 0:
        last = torch.full((seqlen_q,), seqlen_k - 1, dtype=torch.long, device=device)
    else:
        last = (causal_limit(seqlen_q, seqlen_k, device) + right).clamp(max=seqlen_k - 1)
    return first, last


def visible_keys(seqlen_q: int, seqlen_k: int, causal: bool, window=NO_WINDOW, keys=None, device=None):
    """(Sq, len(keys)) bool: which of ``keys`` (default: all) each query row sees."""
    first, last = key_limits(seqlen_q, seqlen_k, causal, window, device)
    keys = torch.arange(seqlen_k, device=device) if keys is None else keys
    return (keys[None, :] >= first[:, None]) & (keys[None, :] <= last[:, None])


def seen_blocks(seqlen_q: int, seqlen_k: int, causal: bool, window, block_n: int) -> range:
    """The key blocks of ``block_n`` that some query row sees; the others are never read."""
    first, last = key_limits(seqlen_q, seqlen_k, causal, window)
    if seqlen_q == 0 or bool((first > last).all()):
        return range(0)
    return range(int(first.min()) // block_n, int(last.max()) // block_n + 1)


def attention_fp64(q, k, v, causal: bool = True, softmax_scale: float | None = None,
                   return_lse: bool = False, chunk: int = 1024, window_size=NO_WINDOW):
    """Exact attention in float64 on any-dtype inputs (FP8 inputs must be dequantized first).

    Chunked over query rows so a 32K-token head fits in memory. Returns (B, Sq, Hq, Dv)
    float64 and, with return_lse, the natural-log LSE (B, Hq, Sq).
    """
    B, Sq, Hq, D = q.shape
    Sk = k.shape[1]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    qh = q.permute(0, 2, 1, 3).double()
    kh = _expand_kv(k, Hq).double()
    vh, bad_keys = confined_values(_expand_kv(v, Hq).double())
    out = torch.empty(B, Hq, Sq, v.shape[-1], dtype=torch.float64, device=q.device)
    lse = torch.empty(B, Hq, Sq, dtype=torch.float64, device=q.device)
    first, last = key_limits(Sq, Sk, causal, window_size, q.device)
    keys = torch.arange(Sk, device=q.device)
    for i0 in range(0, Sq, chunk):
        i1 = min(i0 + chunk, Sq)
        s = torch.einsum("bhid,bhjd->bhij", qh[:, :, i0:i1], kh) * scale
        visible = (keys[None, :] >= first[i0:i1, None]) & (keys[None, :] <= last[i0:i1, None])
        s = s.masked_fill(~visible, float("-inf"))
        m = s.amax(-1, keepdim=True)
        p = torch.exp(s - m)
        denom = p.sum(-1, keepdim=True)
        o = torch.einsum("bhij,bhjd->bhid", p, vh) / denom
        sees_bad = (visible & bad_keys[:, :, None, :]).any(-1, keepdim=True)
        out[:, :, i0:i1] = o.masked_fill(sees_bad, float("nan"))
        lse[:, :, i0:i1] = (m + torch.log(denom)).squeeze(-1)
    out = out.permute(0, 2, 1, 3)
    return (out, lse) if return_lse else out


def dequantize(x8: torch.Tensor, descale: torch.Tensor, kind: str) -> torch.Tensor:
    """float64 values of FP8 q/k/v given their normalized descales (see zyfa.spec.descales)."""
    x = x8.double() if x8.dtype != torch.float8_e4m3fn else e4m3_decode(x8.view(torch.uint8))
    if kind in ("q", "k"):   # descale (B, H, S) per token
        return x * descale.double().permute(0, 2, 1)[..., None]
    return x * descale.double()[:, None, :, :]   # v: (B, Hkv, Dv) per channel


def _qk_values(x: torch.Tensor) -> torch.Tensor:
    """float64 values of E4M3 or int8 q / k."""
    return x.double() if x.dtype == torch.int8 else e4m3_decode(x.view(torch.uint8))


def fp8_attention_spec(q, k, v, q_descale=None, k_descale=None, v_descale=None,
                       causal: bool = True, softmax_scale: float | None = None,
                       p_rule: str = DEFAULT_P_RULE, ref_rule: str = DEFAULT_REF_RULE,
                       block_n: int = KEY_BLOCK, rescale_threshold: float = RESCALE_THRESHOLD,
                       fused_fma: bool = True, return_lse: bool = False, window_size=NO_WINDOW):
    """The blockwise FP8 algorithm (module docstring), bit for bit in the P bits.

    q/k/v are float8_e4m3fn in FlashAttention layout (v may be a transposed view), or q and
    k int8 (the INT8 Q.K^T mode: their dot products are exact integers, which float32 holds
    for head dims up to 256); descales as flash_attn_func takes them. ``fused_fma=False`` mirrors hardware that
    rounds a*b+c twice (Triton's interpreter). Returns float64 output (and LSE).
    """
    check_rules(p_rule, ref_rule)
    q8, k8, v8 = q, k, v
    B, Sq, Hq, D = q8.shape
    Sk, Hkv, Dv = k8.shape[1], k8.shape[2], v8.shape[-1]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    qs, ks, vs = normalize_descales(q8, k8, v8, q_descale, k_descale, v_descale)

    qv = _qk_values(q8).permute(0, 2, 1, 3)                               # (B, Hq, Sq, D)
    kv = _expand_kv(_qk_values(k8.contiguous()), Hq)                      # (B, Hq, Sk, D)
    vv, bad_keys = confined_values(_expand_kv(e4m3_decode(v8.contiguous().view(torch.uint8)), Hq))
    group = Hq // Hkv
    int8 = q8.dtype == torch.int8                        # the INT8 Q.K^T mode: c and m on a grid
    # c, the factor from raw dot products to the log2 domain, in float32 as the kernels form it
    col_fac = ks.repeat_interleave(group, dim=1).float()                   # (B, Hq, Sk)
    if is_per_token(q_descale) or is_per_token(k_descale):
        row_fac = row_factor(qs, scale)                                    # (B, Hq, Sq)

        def factor(k0, k1):
            return row_fac[..., None] * col_fac[:, :, None, k0:k1]
    else:
        c = ((qs[..., :1] * col_fac[..., :1]) * (scale * LOG2E)).float()   # (B, Hq, 1)

        def factor(k0, k1):
            return c[..., None]
    v_fac = vs.repeat_interleave(group, dim=1).double()                    # (B, Hq, Dv)

    first, last = key_limits(Sq, Sk, causal, window_size, q8.device)
    unrounded = sums_unrounded(p_rule, ref_rule)
    A = torch.full((B, Hq, Sq), NEG_FLOOR, dtype=torch.float32, device=q8.device)
    total = torch.zeros(B, Hq, Sq, Dv, dtype=torch.float64, device=q8.device)
    l = torch.zeros(B, Hq, Sq, dtype=torch.float64, device=q8.device)
    sees_bad = torch.zeros(B, Hq, Sq, dtype=torch.bool, device=q8.device)
    for j in seen_blocks(Sq, Sk, causal, window_size, block_n):
        k0, k1 = j * block_n, min((j + 1) * block_n, Sk)
        acc = torch.einsum("bhid,bhjd->bhij", qv, kv[:, :, k0:k1]).float()
        fac = grid_factor(factor(k0, k1)) if int8 else factor(k0, k1)
        keys = torch.arange(k0, k1, device=q8.device)
        valid = (keys[None, :] >= first[:, None]) & (keys[None, :] <= last[:, None])
        if int8:                                          # the exact max on M |c|'s grid (int8_grid)
            offset = grid_offset(fac)
            X, m = grid_max((acc.double() * fac.double()).masked_fill(~valid, float("-inf")).amax(-1), offset)
        else:                                             # t = S c; all-masked rows keep the floor
            m = torch.clamp((acc * fac).masked_fill(~valid, float("-inf")).amax(-1), min=NEG_FLOOR)
        if ref_rule == "running":
            A_new = torch.maximum(A, m)
            r = A_new
        else:
            A_new = torch.where(m > A + rescale_threshold, m, A)
            r = m if ref_rule == "block" else A_new - torch.floor(A_new - m)
        alpha = torch.exp2((A - A_new).double())
        beta = torch.exp2((r - A_new).double())
        y = fma32(acc, fac, -r[..., None], fused_fma).masked_fill(~valid, float("-inf"))
        if int8 and ref_rule == "block" and p_rule == "exact":   # y + 8 as the kernel's FFMA gives it
            y8 = y_shifted(acc, fac, X, offset, fused_fma).masked_fill(~valid, float("-inf"))
            p = e4m3_decode(e4m3_encode_nonneg(torch.exp2(y8.double())))
        else:
            p = e4m3_decode(p_bits(y, p_rule, fused_fma))
        p = p.masked_fill(~valid, 0.0)
        total = total * alpha[..., None] + torch.einsum("bhij,bhjd->bhid", p, vv[:, :, k0:k1]) * beta[..., None]
        p_sum = torch.exp2(y.double() + P_OFFSET_LOG2).masked_fill(~valid, 0.0) if unrounded else p
        l = l * alpha + p_sum.sum(-1) * beta
        sees_bad |= (valid & bad_keys[:, :, None, k0:k1]).any(-1)
        A = A_new
    out = (total * v_fac[:, :, None, :] / l[..., None]).masked_fill(sees_bad[..., None], float("nan"))
    out = out.permute(0, 2, 1, 3)
    if not return_lse:
        return out
    lse = math.log(2.0) * (A.double() + torch.log2(l) - P_OFFSET_LOG2)
    return out, lse
