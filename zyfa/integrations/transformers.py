"""Hugging Face transformers attention backends: ``zyfa`` (BF16/FP16) and ``zyfa_fp8``
(q, k, v quantized to E4M3 on the fly with zyfa.quantize_fp8).

    import zyfa.integrations.transformers as zt
    zt.register()
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="zyfa_fp8")

Both names are registered with AttentionInterface (the attention call) and with
AttentionMaskInterface (the mask builder; without it transformers would hand a custom
backend no causal information). The mask builder is SDPA's: it returns None when the
mask is plain causal, which is what zyfa runs. Anything else -- a padding or sliding-window
mask, a decode step (one query), dropout, soft-capping, attention sinks, a head size or
dtype zyfa does not take -- goes to SDPA, with one log line per reason.
"""
from __future__ import annotations

import logging


import zyfa

from ..quantize import quantize_fp8
from ..spec.shapes import HEAD_DIMS
from ..validation import HALF_DTYPES

log = logging.getLogger("zyfa")
NAMES = ("zyfa", "zyfa_fp8")
_logged: set[str] = set()


def _fallback_reason(module, query, key, value, attention_mask, dropout, kwargs) -> str | None:
    if attention_mask is not None:
        return "an explicit attention mask (padding or sliding window)"
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


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """zyfa in BF16/FP16; returns (out (B, S, H, Dv), None) as transformers expects."""
    reason = _fallback_reason(module, query, key, value, attention_mask, dropout, kwargs)
    if reason:
        return _sdpa(module, query, key, value, attention_mask, reason, dropout=dropout, scaling=scaling, **kwargs)
    q, k, v, causal = _zyfa_layout(module, query, key, value, kwargs)
    return zyfa.flash_attn_func(q, k, v, softmax_scale=scaling, causal=causal), None


def fp8_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """zyfa on E4M3 inputs quantized per (batch, kv head) on the fly; output in the query's dtype."""
    reason = _fallback_reason(module, query, key, value, attention_mask, dropout, kwargs)
    if reason:
        return _sdpa(module, query, key, value, attention_mask, reason, dropout=dropout, scaling=scaling, **kwargs)
    q, k, v, causal = _zyfa_layout(module, query, key, value, kwargs)
    x = quantize_fp8(q, k, v)
    out = zyfa.flash_attn_func(**x.kwargs(), softmax_scale=scaling, causal=causal)
    return out.to(query.dtype), None


def register_backend(name: str, attention_fn, mask_fn=None) -> None:
    """Register an attention function under ``name`` together with its mask builder
    (SDPA's by default: None for a plain causal mask)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    AttentionInterface.register(name, attention_fn)
    AttentionMaskInterface.register(name, mask_fn or sdpa_mask)


def register() -> None:
    """Make attn_implementation="zyfa" and "zyfa_fp8" available (idempotent)."""
    for name, fn in zip(NAMES, (attention_forward, fp8_attention_forward)):
        register_backend(name, fn)
