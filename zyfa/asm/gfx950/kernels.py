"""The gfx950 attention kernel on a device: assembled once per specialization, launched per
head through the HIP runtime on PyTorch's current stream.

**Never run on an MI355X.** Tests drive it through a fake HIP runtime that executes the same
assembly in the emulator on the tensors' memory (tests/test_gfx950.py).
"""
from __future__ import annotations

import functools
import logging
import math

import torch

from ...scales import head_factor, per_channel_v_descale
from .attention import QUERIES, REF_RULES, WAVES, attention_kernel, permuted_vt
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
    """FP8 attention by the generated gfx950 kernel (64-key blocks), one launch per head.
    Inputs validated by flash_attn_func (per-head descales, lean P, block or block_pow2 references).
    Returns (out BF16 (B, Sq, Hq, Dv), lse float32 (B, Hq, Sq)). One host sync per call:
    the kernel takes its factor c by value."""
    if ref_rule not in REF_RULES:
        raise ValueError(f"the generated kernel implements ref_rule {REF_RULES}, got {ref_rule!r}")
    B, Sq, Hq, D = q.shape
    Sk, Hkv, Dv = k.shape[1], k.shape[2], v.shape[-1]
    dev = q.device
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    factors = head_factor(q_descale, k_descale, B, Hkv, scale, dev).cpu()   # the kernel takes c by value
    vd = per_channel_v_descale(v_descale.to(dev), B, Hkv, Dv)
    kernel = _kernel(p_rule, ref_rule, bool(causal), D, Dv, dev.index or 0)
    stream = torch.cuda.current_stream(dev).cuda_stream if dev.type == "cuda" else 0
    out = torch.empty(B, Sq, Hq, Dv, dtype=torch.float32, device=dev)
    lse = torch.empty(B, Hq, Sq, dtype=torch.float32, device=dev)
    group = Hq // Hkv
    for b in range(B):
        for h in range(Hq):
            kvh = h // group
            qh = q[b, :, h].contiguous().view(torch.uint8)
            kh = k[b, :, kvh].contiguous().view(torch.uint8)
            vt = permuted_vt(v[b, :, kvh].contiguous().view(torch.uint8))
            oh = torch.empty(Sq, Dv, dtype=torch.float32, device=dev)
            lh = torch.empty(Sq, dtype=torch.float32, device=dev)
            kernel((-(-Sq // (QUERIES * WAVES)),), (64 * WAVES,), [qh.data_ptr(), kh.data_ptr(), vt.data_ptr(), vd[b, kvh].data_ptr(),
                                                 oh.data_ptr(), lh.data_ptr(), float(factors[b, kvh]), Sq, Sk],
                   stream=stream)
            out[b, :, h] = oh
            lse[b, h] = lh
    return out.to(torch.bfloat16), lse
