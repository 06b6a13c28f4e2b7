"""zyfa attention as a torch.library custom op, so torch.compile(fullgraph=True) traces
through it (the fake implementation gives output shapes without running a kernel) and
CUDA graphs capture it (the launch does no host synchronisation).

`zyfa.flash_attn_func` validates its arguments and dispatches in Python, then calls
``torch.ops.zyfa.flash_attn`` where torch.compile traces or autograd records the call, else
the backend directly (needs_op); call the op directly only with validated arguments.
"""
from __future__ import annotations

from typing import Optional

import torch

from . import dispatch
from .spec.reference import NO_WINDOW
from .spec.shapes import out_dtype


def run_backend(q, k, v, softmax_scale, causal, q_descale, k_descale, v_descale, p_rule, ref_rule, backend,
                window_left=-1, window_right=-1):
    """Run the named backend (already chosen by dispatch.select). Returns (out, lse). The window
    (validation.check_window's) goes only to backends that take one: those that refuse none."""
    run = dispatch.by_name(backend).run
    kw = dict(softmax_scale=softmax_scale, causal=causal)
    if (window_left, window_right) != NO_WINDOW:
        kw["window_size"] = (window_left, window_right)
    if v.dtype == torch.float8_e4m3fn:                  # FP8 (q, k E4M3 or int8)
        kw.update(q_descale=q_descale, k_descale=k_descale, v_descale=v_descale, p_rule=p_rule, ref_rule=ref_rule)
    return run(q, k, v, **kw)


def needs_op(*tensors) -> bool:
    """Whether a call must go through the custom op: inside torch.compile's trace, for tensor
    subclasses (fake tensors get the op's fake implementation), or where autograd would record
    it (its backward raises). Elsewhere run_backend is called directly, which skips the op's
    dispatch (tens of microseconds of host time a call)."""
    return (torch.compiler.is_compiling() or any(type(t) is not torch.Tensor for t in tensors)
            or (torch.is_grad_enabled() and any(t.requires_grad for t in tensors)))


@torch.library.custom_op("zyfa::flash_attn", mutates_args=())
def flash_attn_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: Optional[float],
                  causal: bool, q_descale: Optional[torch.Tensor], k_descale: Optional[torch.Tensor],
                  v_descale: Optional[torch.Tensor], p_rule: str, ref_rule: str,
                  backend: str, window_left: int = -1, window_right: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    """run_backend as a custom op."""
    return run_backend(q, k, v, softmax_scale, causal, q_descale, k_descale, v_descale, p_rule, ref_rule, backend,
                       window_left, window_right)


@flash_attn_op.register_fake
def _flash_attn_fake(q, k, v, softmax_scale, causal, q_descale, k_descale, v_descale, p_rule, ref_rule, backend,
                     window_left=-1, window_right=-1):
    B, Sq, Hq, _ = q.shape
    out = q.new_empty((B, Sq, Hq, v.shape[-1]), dtype=out_dtype(q.dtype))
    lse = q.new_empty((B, Hq, Sq), dtype=torch.float32)
    return out, lse


def _forward_only(ctx, grad_out, grad_lse):
    raise NotImplementedError("zyfa is forward-only (prefill inference): flash_attn_func has no backward pass; "
                              "use torch.nn.functional.scaled_dot_product_attention or FlashAttention to train")


flash_attn_op.register_autograd(_forward_only, setup_context=lambda ctx, inputs, output: None)
