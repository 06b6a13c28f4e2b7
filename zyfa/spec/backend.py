"""The spec as a backend, for checks and the CPU: the blockwise FP8 spec for FP8 inputs and
float64 attention for BF16/FP16 (slow; runs anywhere)."""
from __future__ import annotations

import torch

from .reference import NO_WINDOW, attention_fp64, fp8_attention_spec
from .rules import DEFAULT_P_RULE, DEFAULT_REF_RULE
from .shapes import out_dtype


def supports(p) -> tuple[bool, str]:
    return True, "float64 / bit-level spec in torch (slow)"


def run(q, k, v, softmax_scale=None, causal=True, q_descale=None, k_descale=None,
        v_descale=None, p_rule=DEFAULT_P_RULE, ref_rule=DEFAULT_REF_RULE, window_size=NO_WINDOW):
    if v.dtype == torch.float8_e4m3fn:                  # FP8 (q, k E4M3 or int8)
        out, lse = fp8_attention_spec(q, k, v, q_descale, k_descale, v_descale, causal=causal,
                                      softmax_scale=softmax_scale, p_rule=p_rule, ref_rule=ref_rule,
                                      return_lse=True, window_size=window_size)
    else:
        out, lse = attention_fp64(q, k, v, causal=causal, softmax_scale=softmax_scale, return_lse=True,
                                  window_size=window_size)
    # contiguous, as every kernel writes it and the custom op's fake implementation promises
    return out.to(out_dtype(q.dtype)).contiguous(), lse.float().contiguous()


def supports_decode(p) -> tuple[bool, str]:
    return True, "float64 attention over the (dequantized) cache in torch (slow)"


def run_decode(q, k_cache, v_cache, cache_seqlens, block_table=None, softmax_scale=None, causal=False,
               q_descale=None, k_descale=None, v_descale=None, cache_leftpad=None, **_schedule):
    """Decode by float64 attention; ``_schedule`` (key splits, SM margin) does not apply."""
    from .kv_cache import decode_attention_fp64
    lens = cache_seqlens.tolist()
    out, lse = decode_attention_fp64(q, k_cache, v_cache, lens, block_table, q_descale, k_descale, v_descale,
                                     causal=causal, softmax_scale=softmax_scale,
                                     cache_leftpad=None if cache_leftpad is None else cache_leftpad.tolist())
    return out.to(out_dtype(q.dtype)).contiguous(), lse.float().contiguous()
