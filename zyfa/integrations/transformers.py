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
mask is plain causal, which zyfa runs with flash_attn_func. A boolean mask that is causal
over padded sequences (checked element by element) runs with flash_attn_varlen_func: the
batch is unpadded by the mask, attended, and padded back (zeros at padded query positions).
Anything else -- a sliding-window or other custom mask, a decode step (one query), dropout,
soft-capping, attention sinks, a head size or dtype zyfa does not take, a padded batch in the
INT8 mode (its per-token scales do not go through the varlen call) -- goes to SDPA, with one
log line per reason.
"""
from __future__ import annotations

import logging

import torch

import zyfa

from ..quantize import quantize_fp8, quantize_int8_qk
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
    if query.shape[2] == 1:
        return "a decode step (one query token)"
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


def _zyfa_layout(module, query, key, value, kwargs):
    """(B, H, S, D) -> FlashAttention layout, with SDPA's causal handling of an empty static cache."""
    is_causal = kwargs.get("is_causal")
    causal = bool(getattr(module, "is_causal", True) if is_causal is None else is_causal)
    q_len = query.shape[2]
    if causal and key.shape[2] > q_len:
        # the mask builder returned None with kv_len > q_len only for an empty StaticCache:
        # the keys past q_len are unfilled slots (as sdpa_attention_forward slices them)
        key, value = key[:, :, :q_len], value[:, :, :q_len]
    return query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), causal


def _padding(mask, q_len):
    """(valid_q (B, Q), valid_k (B, KV)) when ``mask`` (bool, (B, 1, Q, KV)) is exactly causal over
    padded sequences -- query i (key position i + KV - Q) sees the valid keys at positions <= its
    own -- else None. Padded query rows are not checked: their outputs are zeros and no valid
    token attends to them."""
    if mask.dtype != torch.bool or mask.dim() != 4 or mask.shape[1] != 1 or mask.shape[-1] < q_len:
        return None
    m = mask[:, 0]
    kv_len = m.shape[-1]
    valid_k = m.any(1)
    valid_q = valid_k[:, kv_len - q_len:]
    pos = torch.arange(kv_len, device=m.device)
    seen = pos[None, :] <= pos[kv_len - q_len:, None]                       # (Q, KV) causal
    expected = valid_q[:, :, None] & valid_k[:, None, :] & seen
    return (valid_q, valid_k) if torch.equal(m & valid_q[:, :, None], expected) else None


def _cu(valid):
    return torch.nn.functional.pad(valid.sum(1).cumsum(0), (1, 0)).to(torch.int32)


def _varlen(query, key, value, valid_q, valid_k, scaling, fp8):
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
                                         int(lens_q.max()), int(lens_k.max()), softmax_scale=scaling, causal=True, **kw)
    out = packed.new_zeros(*q.shape[:3], value.shape[-1])
    out[valid_q] = packed
    return out.to(query.dtype)


def _forward(module, query, key, value, attention_mask, dropout, scaling, kwargs, quant=None):
    """``quant``: None (BF16/FP16), "fp8" or "int8" (QUANTIZERS)."""
    reason = _fallback_reason(module, query, key, value, dropout, kwargs)
    padding = None
    if reason is None and attention_mask is not None:
        padding = _padding(attention_mask, query.shape[2])
        if padding is None:
            reason = "an attention mask other than causal over padding (sliding window or custom)"
        elif quant == "int8":
            reason = "a padded batch in the INT8 mode (per-token scales do not go through the varlen call)"
    if reason:
        return _sdpa(module, query, key, value, attention_mask, reason, dropout=dropout, scaling=scaling, **kwargs)
    if padding is not None:
        return _varlen(query, key, value, *padding, scaling, quant == "fp8"), None
    q, k, v, causal = _zyfa_layout(module, query, key, value, kwargs)
    if quant is None:
        return zyfa.flash_attn_func(q, k, v, softmax_scale=scaling, causal=causal), None
    x = QUANTIZERS[quant](q, k, v)
    out = zyfa.flash_attn_func(**x.kwargs(), softmax_scale=scaling, causal=causal, ref_rule=REF_RULES[quant])
    return out.to(query.dtype), None


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
