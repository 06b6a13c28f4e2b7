"""zyfa's public attention call, FlashAttention-compatible."""
from __future__ import annotations

import torch

from . import backends as _backends  # noqa: F401  (registers the backends)
from . import dispatch
from .ops import flash_attn_op, needs_op, run_backend
from .spec.descales import is_per_key_block, is_per_token
from .spec.shapes import out_dtype
from .validation import check_out, check_window, fp8_rules, refuse_unsupported, softmax_scale_value, validate


def _problem(q, k, v, causal, p_rule, ref_rule, is_fp8, q_descale, k_descale, window) -> dispatch.Problem:
    """A dense call's Problem; its descales' layout as the backends ask for it."""
    return dispatch.problem(q.device, (q.shape[-1], v.shape[-1]), q.shape[1], k.shape[1], causal=causal, is_fp8=is_fp8,
                            p_rule=p_rule, ref_rule=ref_rule, int8_qk=q.dtype == torch.int8,
                            per_token_descales=is_per_token(q_descale) or is_per_token(k_descale),
                            k_descale_per_key=is_per_token(k_descale) and not is_per_key_block(k_descale, k.shape[1]),
                            window=window)


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, qv=None, q_descale=None, k_descale=None,
                    v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0, num_splits=1,
                    pack_gqa=None, deterministic=False, sm_margin=0, return_attn_probs=False, *, dropout_p=0.0,
                    alibi_slopes=None, return_softmax_lse=False, out=None, return_lse=False, backend="auto",
                    p_rule=None, ref_rule=None):
    """Prefill attention, FlashAttention layout, FlashAttention-3's signature.

    q: (batch, seqlen_q, heads, head_dim); k, v: (batch, seqlen_k, kv_heads, head_dim[_v]).
    dtypes: bfloat16, float16, or float8_e4m3fn (then q/k/v_descale are required;
    see zyfa.spec.descales for their shapes and zyfa.quantize_fp8 to make them).
    GQA/MQA: query head h uses kv head h // (heads // kv_heads).
    Head dims (qk, v): (64, 64), (128, 128), (256, 256), (192, 128).

    causal (default False, as in FlashAttention) aligns the mask bottom-right (needs
    seqlen_q <= seqlen_k): query i sees keys j <= i + seqlen_k - seqlen_q. For seqlen_q=2,
    seqlen_k=5:

        keys:  0 1 2 3 4
        q0     1 1 1 1 0
        q1     1 1 1 1 1

    window_size=(left, right): a sliding window, query i sees keys
    i + seqlen_k - seqlen_q - left <= j <= i + seqlen_k - seqlen_q + right (-1: unbounded;
    with causal, right is 0). Key blocks wholly outside it are never read.

    Returns out (batch, seqlen_q, heads, head_dim_v) in bfloat16 (float16 for float16
    inputs) and, with return_attn_probs / return_softmax_lse / return_lse, (out, lse): the
    float32 natural-log LSE (batch, heads, seqlen_q), as FlashAttention-3 returns it. ``out=``:
    a tensor of that shape and dtype to write the output into.
    p_rule / ref_rule select the FP8 probability and reference rules (zyfa.spec.rules; None:
    "exact" and "block"); they apply to FP8 inputs only.

    FlashAttention's other options: dropout_p, softcap and attention_chunk must be 0, qv and
    alibi_slopes None (NotImplementedError otherwise); deterministic is accepted (zyfa's forward
    is deterministic either way), num_splits, pack_gqa and sm_margin too (speed hints of FA3's
    kernels; they do not change the result).

    Forward only: a backward pass raises NotImplementedError.
    """
    refuse_unsupported(dropout_p=dropout_p, softcap=softcap, alibi_slopes=alibi_slopes, qv=qv,
                       attention_chunk=attention_chunk)
    is_fp8 = validate(q, k, v, causal, softmax_scale, q_descale, k_descale, v_descale)
    causal, window = check_window(window_size, causal, q.shape[1], k.shape[1])
    p_rule, ref_rule = fp8_rules(is_fp8, p_rule, ref_rule, q.dtype)
    problem = _problem(q, k, v, causal, p_rule, ref_rule, is_fp8, q_descale, k_descale, window)
    b = dispatch.select(problem, backend)
    if out is not None:
        check_out(out, (*q.shape[:3], v.shape[-1]), out_dtype(q.dtype), q.device)
    call = flash_attn_op if needs_op(q, k, v) else run_backend
    result, lse = call(q, k, v, softmax_scale_value(softmax_scale), causal, q_descale, k_descale, v_descale,
                       p_rule, ref_rule, b.name, *window)
    if out is not None:
        result = out.copy_(result)
    return (result, lse) if (return_lse or return_softmax_lse or return_attn_probs) else result


def explain(q, k, v, causal=False, q_descale=None, k_descale=None, v_descale=None,
            backend="auto", p_rule=None, ref_rule=None, softmax_scale=None, window_size=(-1, -1)) -> str:
    """Which backend flash_attn_func would use for these inputs, and why each other would not."""
    is_fp8 = validate(q, k, v, causal, softmax_scale, q_descale, k_descale, v_descale)
    causal, window = check_window(window_size, causal, q.shape[1], k.shape[1])
    p_rule, ref_rule = fp8_rules(is_fp8, p_rule, ref_rule, q.dtype)
    problem = _problem(q, k, v, causal, p_rule, ref_rule, is_fp8, q_descale, k_descale, window)
    lines = []
    try:
        chosen = dispatch.select(problem, backend).name
        lines.append(f"selected: {chosen}")
    except (RuntimeError, ValueError) as e:
        lines.append(f"selected: none ({e})")
    for name, ok, why in dispatch.assess(problem):
        lines.append(f"  {name:10s} {'can run' if ok else 'cannot'}: {why}")
    return "\n".join(lines)
