"""A KV cache as flash_attn_with_kvcache reads it: its descale shapes, its float64 values, and
float64 decode attention over it (the reference every decode path is held to).

A cache is dense, k/v (batch, cache_len, kv_heads, d), sequence b's keys in row b; or paged,
k/v (num_pages, page_size, kv_heads, d) with a block table (batch, max_pages) naming sequence
b's pages in order. Either way sequence b uses its first ``cache_seqlens[b]`` keys; a dense
cache with ``cache_leftpad`` (FlashAttention's name) uses tokens [cache_leftpad[b], cache_seqlens[b])
of its row (left-padded batches).

E4M3 K/V descales (float32), indexed like the cache with head_dim dropped:

  per (sequence, kv head):  () | (kv_heads,) | (batch, kv_heads)     zyfa.spec.descales' coarse shapes
  per token:                (cache rows, kv_heads, tokens a row)      rows = k.shape[0], tokens = k.shape[1]

so a dense cache's per-token descale is (batch, kv_heads, cache_len), the prefill per-token
shape, and a paged cache's is (num_pages, kv_heads, page_size), kept beside its pages as an
engine appending quantized tokens writes it. Its q_descale (E4M3 q) takes the coarse shapes.
"""
from __future__ import annotations

import torch

from .descales import check_descale, coarse_descale, is_per_token
from .e4m3 import e4m3_decode, e4m3_encode_nonneg
from .reference import attention_fp64, fp8_attention_spec


def uses_fp8_dots(k_cache, k_descale, v_descale, fp8_dots=None) -> bool:
    """Whether an E4M3 cache runs the FP8 dots: where both descales are per (sequence, kv head)
    (fp8_dots None or True), not with per-token descales, nor with fp8_dots=False (the widened
    BF16 dots). fp8_dots=True with per-token descales is refused."""
    if k_cache.dtype != torch.float8_e4m3fn or fp8_dots is False:
        return False
    coarse = not is_per_token(k_descale) and not is_per_token(v_descale)
    if fp8_dots and not coarse:
        raise NotImplementedError("fp8_dots=True takes k_descale and v_descale per (sequence, kv head); per-token "
                                  "descales run the widened BF16 dots (fp8_dots=None or False)")
    return coarse


def check_cache_descale(name: str, d, batch: int, cache: torch.Tensor) -> None:
    """Raise TypeError/ValueError unless ``d`` is a descale of ``cache``'s shapes (above)."""
    rows, tokens, hkv = cache.shape[:3]
    check_descale(name, d, batch, hkv, (rows, hkv, tokens))


def _row_values(rows: torch.Tensor, descale) -> torch.Tensor:
    """float64 values of cache rows (n, tokens, kv_heads, d): 16-bit as they are, E4M3 times
    ``descale``, per token (n, kv_heads, tokens) or per row and kv head (n, kv_heads)."""
    if rows.dtype != torch.float8_e4m3fn:
        return rows.double()
    x = e4m3_decode(rows.contiguous().view(torch.uint8))
    d = descale.to(x.device).double()
    return x * (d.permute(0, 2, 1)[..., None] if d.dim() == 3 else d[:, None, :, None])


def sequence_keys(cache: torch.Tensor, descale, cache_seqlens: list[int], block_table=None,
                  cache_leftpad: list[int] | None = None) -> list[torch.Tensor]:
    """Each sequence's first cache_seqlens[b] rows of the cache, float64 (n, kv_heads, d),
    the pages gathered through the block table; the first cache_leftpad[b] of them dropped."""
    batch, hkv = len(cache_seqlens), cache.shape[2]
    coarse = None
    if descale is not None and not is_per_token(descale):
        coarse = coarse_descale(descale.float(), batch, hkv, "descale")          # (batch, kv_heads)
    out = []
    for b, n in enumerate(cache_seqlens):
        if block_table is None:
            ids = torch.tensor([b], device=cache.device)
        else:
            ids = block_table[b, :-(-n // cache.shape[1])].long().to(cache.device)
        d = None
        if coarse is not None:
            d = coarse[b:b + 1].expand(len(ids), hkv)
        elif descale is not None:
            d = descale.index_select(0, ids.to(descale.device))
        left = cache_leftpad[b] if cache_leftpad is not None else 0
        out.append(_row_values(cache.index_select(0, ids), d).flatten(0, 1)[left:n])
    return out


def decode_attention_fp64(q, k_cache, v_cache, cache_seqlens: list[int], block_table=None, q_descale=None,
                          k_descale=None, v_descale=None, causal: bool = False, softmax_scale=None,
                          cache_leftpad: list[int] | None = None):
    """float64 attention of q (batch, seqlen_q, heads, d) over each sequence's cached keys
    (values of E4M3 inputs dequantized), causal bottom-right as in prefill. Returns out
    (batch, seqlen_q, heads, d_v) and the natural-log LSE (batch, heads, seqlen_q), float64."""
    qv = q.double() if q.dtype != torch.float8_e4m3fn else e4m3_decode(q.contiguous().view(torch.uint8))
    if q_descale is not None:
        qd = coarse_descale(q_descale.to(q.device).float(), q.shape[0], k_cache.shape[2], "q_descale")
        qv = qv * qd.double().repeat_interleave(q.shape[2] // k_cache.shape[2], 1)[:, None, :, None]
    ks = sequence_keys(k_cache, k_descale, cache_seqlens, block_table, cache_leftpad)
    vs = sequence_keys(v_cache, v_descale, cache_seqlens, block_table, cache_leftpad)
    outs, lses = [], []
    for b in range(q.shape[0]):
        o, lse = attention_fp64(qv[b:b + 1], ks[b][None], vs[b][None], causal=causal,
                                softmax_scale=softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5,
                                return_lse=True)
        outs.append(o)
        lses.append(lse)
    return torch.cat(outs), torch.cat(lses)


def decode_query_e4m3(q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A 16-bit q (batch, seqlen_q, heads, d) as the decode kernel's FP8 dots quantize it: each
    (token, head) row as E4M3 codes with a power-of-two descale 2^e, e the least with
    max|row| / 2^e <= 448 (clamped to [-126, 126]; an all-zero row takes -126), rounded to
    nearest even. Returns (codes float8_e4m3fn like q, descale (batch, heads, seqlen_q) float32)."""
    x = q.float()
    bits = x.abs().amax(-1).view(torch.int32)
    e = ((bits >> 23) & 0xFF) - 135 + ((bits & 0x7FFFFF) > 0x600000).to(torch.int32)
    e = e.clamp(-126, 126)
    scaled = x.double() * torch.exp2(-e.double())[..., None]          # exact: a power of two
    codes = e4m3_encode_nonneg(scaled.abs()) | torch.where(scaled < 0, 0x80, 0).to(torch.int32)
    descale = torch.exp2(e.double()).float().permute(0, 2, 1).contiguous()
    return codes.to(torch.uint8).view(torch.float8_e4m3fn), descale


def _raw_rows(cache: torch.Tensor, b: int, n: int, block_table=None, left: int = 0) -> torch.Tensor:
    """Sequence b's cached rows [left, n) as stored (n - left, kv_heads, d)."""
    if block_table is None:
        return cache[b, left:n]
    ids = block_table[b, :-(-n // cache.shape[1])].long().to(cache.device)
    return cache.index_select(0, ids).flatten(0, 1)[left:n]


def decode_fp8_spec(q, k_cache, v_cache, cache_seqlens: list[int], block_table=None, q_descale=None,
                    k_descale=None, v_descale=None, causal: bool = False, softmax_scale=None, block_n: int = 64,
                    fused_fma: bool = True, cache_leftpad: list[int] | None = None):
    """What the decode kernel's FP8 dots compute with one key split of ``block_n``-key tiles:
    zyfa.spec.reference.fp8_attention_spec (P rule exact, ref_rule running) of each sequence
    over its cached E4M3 keys, q quantized by decode_query_e4m3 unless it is E4M3 already;
    k_descale and v_descale per (sequence, kv head). Returns float64 out (batch, seqlen_q,
    heads, d_v) and LSE (batch, heads, seqlen_q)."""
    B, Hkv = q.shape[0], k_cache.shape[2]
    if q.dtype == torch.float8_e4m3fn:
        q8, qd = q, coarse_descale(q_descale.float(), B, Hkv, "q_descale")
    else:
        q8, qd = decode_query_e4m3(q)
    kd = coarse_descale(k_descale.float(), B, Hkv, "k_descale")
    vd = coarse_descale(v_descale.float(), B, Hkv, "v_descale")
    outs, lses = [], []
    for b, n in enumerate(cache_seqlens):
        left = cache_leftpad[b] if cache_leftpad is not None else 0
        k8 = _raw_rows(k_cache, b, n, block_table, left)[None]
        v8 = _raw_rows(v_cache, b, n, block_table, left)[None]
        o, lse = fp8_attention_spec(q8[b:b + 1], k8, v8, qd[b:b + 1], kd[b:b + 1], vd[b:b + 1], causal=causal,
                                    softmax_scale=softmax_scale, p_rule="exact", ref_rule="running",
                                    block_n=block_n, fused_fma=fused_fma, return_lse=True)
        outs.append(o)
        lses.append(lse)
    return torch.cat(outs), torch.cat(lses)
