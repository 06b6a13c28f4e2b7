"""The gfx950 attention kernel on a device: assembled once per specialization, launched once
for every head through the HIP runtime on PyTorch's current stream.

**Never run on an MI355X.** Tests drive it through a fake HIP runtime that executes the same
assembly in the emulator on the tensors' memory (tests/gfx950/test_gfx950.py).
"""
from __future__ import annotations

import functools
import logging

import torch

from .attention import REF_RULES, WAVES, attention_kernel, grid, launch_args
from .loader import HipKernel, hip_runtime, kernel_args
from .target import assemble

log = logging.getLogger("zyfa")


@functools.cache
def _kernel(rule: str, ref_rule: str, causal: bool, head_dim: int, value_dim: int, device: int) -> HipKernel:
    name, text = attention_kernel(rule, causal, head_dim, value_dim, ref_rule)
    log.warning("zyfa: running generated gfx950 assembly that has been verified in an emulator only, "
                "never on MI355X hardware (%s)", name)
    return HipKernel(assemble(text), name, *kernel_args(text, name), lib=hip_runtime())


def attention_fp8(q, k, v, softmax_scale=None, causal=True, q_descale=None, k_descale=None, v_descale=None,
                  p_rule="lean_cubic", ref_rule="block"):
    """FP8 attention by the generated gfx950 kernel (64-key blocks), every head in one launch.
    Inputs validated by flash_attn_func (per-head descales, a float32 lean rule, block or
    block_pow2 references). Returns (out BF16 (B, Sq, Hq, Dv), lse float32 (B, Hq, Sq)).
    No host synchronization: the factors c go to the kernel as a device table."""
    if ref_rule not in REF_RULES:
        raise ValueError(f"the generated kernel implements ref_rule {REF_RULES}, got {ref_rule!r}")
    B, Sq, Hq, D = q.shape
    Sk, Hkv, Dv = k.shape[1], k.shape[2], v.shape[-1]
    dev = q.device
    t = launch_args(q, k, v, q_descale, k_descale, v_descale, softmax_scale, dev)
    kernel = _kernel(p_rule, ref_rule, bool(causal), D, Dv, dev.index or 0)
    stream = torch.cuda.current_stream(dev).cuda_stream if dev.type == "cuda" else 0
    out = torch.empty(B, Sq, Hq, Dv, dtype=torch.float32, device=dev)
    lse = torch.empty(B, Hq, Sq, dtype=torch.float32, device=dev)
    kernel(grid(q), (64 * WAVES,), [t["q"].data_ptr(), t["k"].data_ptr(), t["vt"].data_ptr(), t["vd"].data_ptr(),
                                     out.data_ptr(), lse.data_ptr(), t["fac"].data_ptr(), t["kv_head"].data_ptr(),
                                     Sq, Sk, Hq, Hkv], stream=stream)
    return out.to(torch.bfloat16), lse
