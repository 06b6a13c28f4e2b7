"""Hugging Face transformers attention backends: ``zyfa`` (BF16/FP16), ``zyfa_fp8`` (q, k, v
quantized to E4M3 on the fly with zyfa.quantize_fp8; the fast mode, ref_rule "running") and
``zyfa_int8`` (the INT8 Q.K^T mode, zyfa.quantize_int8_qk: int8 q and k with per-token and
per-key-block scales, E4M3 v; the most accurate FP8 path).

    import zyfa.integrations.transformers as zt
    zt.register()
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="zyfa_fp8")

The names are registered with AttentionInterface (the attention call) and with
AttentionMaskInterface (the mask builder; without it transformers would hand a custom
backend no causal information). The mask builder is SDPA's: it returns None when the
mask is plain causal, which zyfa runs with flash_attn_func. A boolean mask that is causal --
or sliding-window causal, for the layers of Mistral, Gemma 2/3, gpt-oss-style hybrids --
over the valid tokens (checked element by element; the queries may sit anywhere in the cache,
as in a StaticCache) runs with flash_attn_func on the filled keys when nothing is padded,
else with flash_attn_varlen_func: the batch is unpadded by the mask, attended, and padded back
(zeros at padded query positions). The window goes to zyfa as window_size.

A decode step -- 1..16 queries (MAX_QUERIES) after cached keys -- runs flash_attn_with_kvcache on
the cache as transformers hands it, (batch, kv_heads, cache_len, d) read through a transposed
view, when each sequence's keys are one range of slots ending at its last query: cache_seqlens
the range's end, cache_leftpad its start (left padding, a sliding window's oldest key), both
read from the mask, or without a mask from the positions. Every backend decodes so: the cache
as it is, BF16, or E4M3 codes with per-token descales from fp8_cache.E4M3Cache (zyfa_fp8 and
zyfa_int8 quantize prefill only; quantizing one query a step buys nothing). A step the decode
kernel cannot take -- keys padded in the middle, a window that cuts between the step's queries
(the decode kernel has no window), head dims (192, 128) -- runs the prefill path below.
Anything else -- another custom mask, dropout, soft-capping, attention sinks, a head size or
dtype zyfa does not take, a padded batch in the INT8 mode (its per-token scales do not go
through the varlen call) -- goes to SDPA, with one log line per reason. An E4M3 cache is
dequantized for every call but a decode step.
"""
from __future__ import annotations

import logging

import torch

import zyfa

from ..decode_checks import MAX_QUERIES
from ..quantize import quantize_fp8, quantize_int8_qk
from ..validation import FP8_DTYPE
from ..spec.shapes import HEAD_DIMS
from ..validation import HALF_DTYPES

log = logging.getLogger("zyfa")
NAMES = ("zyfa", "zyfa_fp8", "zyfa_int8")
QUANTIZERS = {"fp8": quantize_fp8, "int8": quantize_int8_qk}
# each mode's reference rule: zyfa_fp8 the fast mode (end to end as accurate as the default and as
# FA3 FP8, since quantizing q and k dominates there: docs/decisions.md), zyfa_int8 the per-block
# fold, whose kernel accuracy shows end to end once q and k are int8
REF_RULES = {"fp8": "running", "int8": "block"}
_logged: set[str] = set()


def _fallback_reason(module, query, key, value, dropout, kwargs) -> str | None:
    if dropout:
        return "dropout > 0"
    for name in ("softcap", "s_aux", "position_bias"):
        if kwargs.get(name) is not None:
            return f"{name} is set"
    if kwargs.get("output_attentions"):
        return "output_attentions=True"
    if query.dtype not in HALF_DTYPES:
        return f"dtype {query.dtype} (zyfa takes bfloat16/float16 activations)"
    if (query.shape[-1], value.shape[-1]) not in HEAD_DIMS:
        return f"head dims ({query.shape[-1]}, {value.shape[-1]})"
    return None


def _sdpa(module, query, key, value, attention_mask, reason, **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    if reason not in _logged:
        _logged.add(reason)
        log.warning("zyfa: falling back to SDPA for %s (logged once)", reason)
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


def _window_left(module, kwargs) -> int:
    """FlashAttention's window left for the layer: transformers' sliding window W lets query i see
    keys j > i - W, W keys with its own (left = W - 1); -1 for a full-attention layer."""
    w = kwargs.get("sliding_window", getattr(module, "sliding_window", None))
    return int(w) - 1 if w else -1


def _is_causal(module, kwargs) -> bool:
    is_causal = kwargs.get("is_causal")
    return bool(getattr(module, "is_causal", True) if is_causal is None else is_causal)


def _unmasked_keys(query, key, kwargs) -> int:
    """Keys a causal call without a mask reads: up to the last query's slot -- cache_position, where
    transformers passes it, else position_ids when every sequence has the same (nothing padded:
    positions are slots) -- else all but for an empty StaticCache (kv_len > q_len with no mask),
    whose keys past q_len are unfilled slots (as sdpa_attention_forward slices them)."""
    cache_position = kwargs.get("cache_position")
    if isinstance(cache_position, torch.Tensor) and cache_position.numel():
        return int(cache_position[-1]) + 1
    pos = kwargs.get("position_ids")
    if isinstance(pos, torch.Tensor) and pos.dim() == 2 and pos.shape[-1] == query.shape[2]:
        last = pos[:, -1]
        if bool((last == last[0]).all()) and query.shape[2] <= int(last[0]) + 1 <= key.shape[2]:
            return int(last[0]) + 1
    return min(key.shape[2], query.shape[2])


# the last mask read (every layer of a forward gets the same tensor): its analysis reads the
# mask on the host, once a forward instead of once a layer
_LAST_LAYOUT: list = [None]


def _mask_layout(mask, q_len: int, left: int):
    """_read_mask_layout, remembered for the last mask tensor (unchanged since: same version)."""
    key = (mask, getattr(mask, "_version", None), q_len, left)
    last = _LAST_LAYOUT[0]
    if last is not None and last[0][0] is mask and last[0][1:] == key[1:]:
        return last[1]
    layout = _read_mask_layout(mask, q_len, left)
    _LAST_LAYOUT[0] = (key, layout)
    return layout


def _read_mask_layout(mask, q_len: int, left: int):
    """(valid_q (B, Q), valid_k (B, KV)) when ``mask`` (bool, (B, 1, Q, KV)) is exactly what
    flash_attn_varlen_func computes on the valid tokens -- causal, with a sliding window of
    ``left`` keys (-1: none), bottom-right aligned -- else None.

    The queries sit in q_len consecutive key slots from s0 (the last q_len of a dynamic cache,
    the first free ones of a static cache; transformers does not always say which): a valid query
    sees its own slot last, so s0 is the largest (last key seen - row). A query is valid where
    its slot is a key some query sees; padded rows are left out and come back as zeros."""
    if mask.dtype != torch.bool or mask.dim() != 4 or mask.shape[1] != 1 or mask.shape[2] != q_len:
        return None
    m = mask[:, 0]
    B, Q, KV = m.shape
    cols = torch.arange(KV, device=m.device)
    last = torch.where(m, cols, -1).amax(-1)                                 # (B, Q)
    s0 = int((last - torch.arange(Q, device=m.device)).amax())
    if s0 < 0 or s0 + Q > KV:
        return None
    valid_k = m.any(1)
    valid_q = valid_k[:, s0:s0 + Q]
    ck = valid_k.cumsum(1) - 1                                               # compacted key index
    cq = ck[:, s0:s0 + Q]
    n_k, n_q = valid_k.sum(1, keepdim=True), valid_q.sum(1, keepdim=True)
    # bottom-right: the valid queries are the last valid keys, in order
    if not torch.equal(torch.where(valid_q, cq, 0), torch.where(valid_q, n_k - n_q + valid_q.cumsum(1) - 1, 0)):
        return None
    seen = ck[:, None, :] <= cq[:, :, None]
    if left >= 0:
        seen &= ck[:, None, :] >= cq[:, :, None] - left
    expected = valid_q[:, :, None] & valid_k[:, None, :] & seen
    return (valid_q, valid_k) if torch.equal(m & valid_q[:, :, None], expected) else None


def _dense_keys(valid_q, valid_k) -> int | None:
    """The key count n where every query is valid and every sequence's valid keys are slots [0, n)
    (no padding): the call is then one dense flash_attn_func on the first n keys."""
    if not bool(valid_q.all()):
        return None
    n = int(valid_k[0].sum())
    return n if bool(valid_k[:, :n].all()) and not bool(valid_k[:, n:].any()) else None


def _cu(valid):
    return torch.nn.functional.pad(valid.sum(1).cumsum(0), (1, 0)).to(torch.int32)


def _varlen(query, key, value, valid_q, valid_k, scaling, fp8, left):
    """Unpad by the mask, flash_attn_varlen_func, pad back: (B, Q, H, Dv) in the query's dtype.
    FP8 scales are per (sequence, kv head), taken over the valid tokens only."""
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))
    kw = {}
    if fp8:
        x = quantize_fp8(*(torch.where(m[:, :, None, None], t, 0) for t, m in ((q, valid_q), (k, valid_k), (v, valid_k))))
        q, k, v = x.q, x.k, x.v
        kw = dict(q_descale=x.q_descale, k_descale=x.k_descale, v_descale=x.v_descale, ref_rule=REF_RULES["fp8"])
    lens_q, lens_k = valid_q.sum(1), valid_k.sum(1)
    packed = zyfa.flash_attn_varlen_func(q[valid_q], k[valid_k], v[valid_k], _cu(valid_q), _cu(valid_k),
                                         int(lens_q.max()), int(lens_k.max()), softmax_scale=scaling, causal=True,
                                         window_size=(left, 0), **kw)
    out = packed.new_zeros(*q.shape[:3], value.shape[-1])
    out[valid_q] = packed
    return out.to(query.dtype)


def _dense(query, key, value, n_keys, scaling, causal, left, quant):
    """One flash_attn_func call on the first n_keys keys, FlashAttention layout."""
    q, k, v = query.transpose(1, 2), key[:, :, :n_keys].transpose(1, 2), value[:, :, :n_keys].transpose(1, 2)
    window = (left, 0 if causal else -1)
    if quant is None:
        return zyfa.flash_attn_func(q, k, v, softmax_scale=scaling, causal=causal, window_size=window)
    x = QUANTIZERS[quant](q, k, v)
    return zyfa.flash_attn_func(**x.kwargs(), softmax_scale=scaling, causal=causal, window_size=window,
                                ref_rule=REF_RULES[quant]).to(query.dtype)


def _key_ranges(query, key, attention_mask, left, kwargs):
    """(starts, ends) (batch,) int32: each sequence's keys are slots [start, end) of its cache row
    and its queries the last of them -- what flash_attn_with_kvcache reads with cache_leftpad and
    cache_seqlens -- or None where the decode kernel cannot take the step."""
    B, Q = query.shape[0], query.shape[2]
    if attention_mask is None:
        n = _unmasked_keys(query, key, kwargs)
        first = max(0, n - Q - left) if left >= 0 else 0          # the oldest key the window shows
        starts = torch.full((B,), first, dtype=torch.int32)
        ends = torch.full((B,), n, dtype=torch.int32)
    else:
        layout = _mask_layout(attention_mask, Q, left)
        if layout is None or not bool(layout[0].all()):          # a custom mask, padded queries
            return None
        valid_k = layout[1]
        cols = torch.arange(valid_k.shape[1], device=valid_k.device)
        starts = torch.where(valid_k, cols, valid_k.shape[1]).amin(1)
        ends = torch.where(valid_k, cols, -1).amax(1) + 1
        if not torch.equal(ends - starts, valid_k.sum(1)):        # padding between the keys
            return None
        starts, ends = starts.int(), ends.int()
    # the kernel has no window: each query of the step must see every key of its range
    if left >= 0 and bool((ends - starts > left + 1).any()):
        return None
    return starts, ends


def _decode(query, key, value, ranges, scaling):
    """flash_attn_with_kvcache over the cache as transformers holds it, (B, KV, len, d) viewed as
    (B, len, KV, d); an E4M3 cache with its per-token descales (B, KV, len)."""
    starts, ends = ranges
    kw = {}
    if key.dtype == FP8_DTYPE:
        from .fp8_cache import descale_of
        kw = dict(k_descale=descale_of(key), v_descale=descale_of(value))
    if bool(starts.any()):
        kw["cache_leftpad"] = starts
    out = zyfa.flash_attn_with_kvcache(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                                       cache_seqlens=ends, softmax_scale=scaling, causal=True, **kw)
    return out.to(query.dtype)


def _decodable(query, key, value, causal) -> bool:
    """A decode step the decode kernel takes: 1..MAX_QUERIES causal queries after cached keys,
    its head dims, a 16-bit cache of the query's dtype or an E4M3 cache with BF16 queries."""
    cache_ok = key.dtype == query.dtype or (key.dtype == FP8_DTYPE and query.dtype == torch.bfloat16)
    return (causal and cache_ok and query.shape[2] <= MAX_QUERIES and key.shape[2] > query.shape[2]
            and query.shape[-1] == value.shape[-1])


# Eager under torch.compile: transformers compiles a StaticCache model's steps with CUDA graphs
# on a GPU, and traced, the mask reading's data-dependent branches split the step into graphs
# whose replays overwrote tensors it had derived (its key ranges) before the decode call read them
@torch.compiler.disable
def _forward(module, query, key, value, attention_mask, dropout, scaling, kwargs, quant=None):
    """``quant``: None (BF16/FP16), "fp8" or "int8" (QUANTIZERS)."""
    reason = _fallback_reason(module, query, key, value, dropout, kwargs)
    causal, left = _is_causal(module, kwargs), _window_left(module, kwargs)
    if reason is None and _decodable(query, key, value, causal):
        ranges = _key_ranges(query, key, attention_mask, left, kwargs)
        if ranges is not None:
            return _decode(query, key, value, ranges, scaling), None
    if key.dtype == FP8_DTYPE:          # an E4M3 cache outside a decode step: its BF16 values
        from .fp8_cache import dequantize
        key, value = dequantize(key, query.dtype), dequantize(value, query.dtype)
    layout = n_keys = None
    if reason is None and attention_mask is not None:
        layout = _mask_layout(attention_mask, query.shape[2], left) if causal else None
        if layout is None:
            reason = "an attention mask other than causal (or sliding-window causal) over padding"
        else:
            n_keys = _dense_keys(*layout)
            if n_keys is None and quant == "int8":
                reason = "a padded batch in the INT8 mode (per-token scales do not go through the varlen call)"
    if reason:
        return _sdpa(module, query, key, value, attention_mask, reason, dropout=dropout, scaling=scaling, **kwargs)
    if layout is not None and n_keys is None:
        return _varlen(query, key, value, *layout, scaling, quant == "fp8", left), None
    if n_keys is None:
        n_keys = _unmasked_keys(query, key, kwargs) if causal else key.shape[2]
    return _dense(query, key, value, n_keys, scaling, causal, left if causal else -1, quant), None


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """zyfa in BF16/FP16; returns (out (B, S, H, Dv), None) as transformers expects."""
    return _forward(module, query, key, value, attention_mask, dropout, scaling, kwargs)


def fp8_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """zyfa on E4M3 inputs quantized per (batch, kv head) on the fly; output in the query's dtype."""
    return _forward(module, query, key, value, attention_mask, dropout, scaling, kwargs, "fp8")


def int8_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """zyfa's INT8 Q.K^T mode on inputs quantized on the fly; output in the query's dtype."""
    return _forward(module, query, key, value, attention_mask, dropout, scaling, kwargs, "int8")


def register_backend(name: str, attention_fn, mask_fn=None) -> None:
    """Register an attention function under ``name`` together with its mask builder
    (SDPA's by default: None for a plain causal mask)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    AttentionInterface.register(name, attention_fn)
    AttentionMaskInterface.register(name, mask_fn or sdpa_mask)


def register() -> None:
    """Make attn_implementation "zyfa", "zyfa_fp8" and "zyfa_int8" available (idempotent)."""
    for name, fn in zip(NAMES, (attention_forward, fp8_attention_forward, int8_attention_forward)):
        register_backend(name, fn)
