"""What the generated sm_90a kernels run: FP8 on Hopper with head dims (64, 64), (128, 128),
MLA's (192, 128) or (256, 256), per-head (or per-tensor) q/k descales, every P rule, block
or running references; the INT8 Q.K^T mode at the same head dims with k descales a block of 128 keys;
BF16 and FP16 at the same head dims; each with a sliding window (window_size) too. They need
cuda-python to load."""
from __future__ import annotations

import torch

from ...device import HAS_CUDA_PYTHON, is_rocm
from ...spec.rules import P_RULES
from ..limits import fp8_refusal
from .layout import HEAD_DIMS, HEAD_DIMS_16, REF_RULES, key_block



def supports(p) -> tuple[bool, str]:
    """(can run, why) for a zyfa.dispatch.Problem."""
    if p.device.type != "cuda" or is_rocm():
        return False, f"generated PTX runs on NVIDIA GPUs, tensors are on {p.device.type}" + (
            " (ROCm)" if is_rocm() and p.device.type == "cuda" else "")
    if p.arch != "sm90":
        return False, f"generated PTX targets sm_90a (Hopper), device is {p.arch}"
    if not p.is_fp8:
        if p.head_dims not in HEAD_DIMS_16:
            return False, f"the generated 16-bit kernel takes head dims {' or '.join(map(str, HEAD_DIMS_16))}, " \
                          f"not {p.head_dims}"
        if not HAS_CUDA_PYTHON:
            return False, "cuda-python is not installed (pip install 'zyfa[cuda]')"
        return True, f"generated PTX kernel for sm_90a (16-bit, d{p.head_dims[0]}/{p.head_dims[1]}{_window(p)})"
    if p.int8_qk:
        return _supports_int8(p)
    refusal = fp8_refusal(p, "generated kernel", p.head_dims in HEAD_DIMS, " or ".join(map(str, HEAD_DIMS)),
                          P_RULES, REF_RULES)
    if refusal:
        return refusal
    if not HAS_CUDA_PYTHON:
        return False, "cuda-python is not installed (pip install 'zyfa[cuda]')"
    mode = ""
    if p.ref_rule == "running":                 # the spec's block_n for these references
        block = key_block(*p.head_dims, p.seqlen_k, p.p_rule, p.ref_rule, p.packed, p.windowed)
        mode = f", running max every {block} keys: the fast mode"
    return True, f"generated PTX kernel for sm_90a (FP8, d{p.head_dims[0]}/{p.head_dims[1]}{mode}{_window(p)})"


def _window(p) -> str:
    return f", sliding window {p.window}" if p.windowed else ""


def _supports_int8(p) -> tuple[bool, str]:
    """The INT8 Q.K^T kernel: dense batches, the E4M3 kernel's head dims (layout_for's int8_qk), k's descales a block of 128
    keys (or coarser: one factor a key block), q's any."""
    if p.packed:
        return False, "the generated INT8 Q.K^T kernel takes dense batches (packed ones run in the Triton kernel)"
    if p.head_dims not in HEAD_DIMS:
        return False, f"the generated INT8 Q.K^T kernel takes head dims {' or '.join(map(str, HEAD_DIMS))}, " \
                      f"not {p.head_dims}"
    if p.k_descale_per_key:
        return False, "the generated INT8 Q.K^T kernel takes k descales a block of 128 keys (quantize_int8_qk's " \
                      "default) or coarser, not a key"
    if p.p_rule not in P_RULES or p.ref_rule != "block":
        return False, f"the generated INT8 Q.K^T kernel implements ref_rule 'block' and p_rule {P_RULES}"
    if not HAS_CUDA_PYTHON:
        return False, "cuda-python is not installed (pip install 'zyfa[cuda]')"
    return True, f"generated PTX kernel for sm_90a (INT8 Q.K^T, d{p.head_dims[0]}{_window(p)})"


def run(q, k, v, **kw):
    from .kernels import attention_16, attention_fp8, attention_int8qk
    if q.dtype == torch.int8:
        return attention_int8qk(q, k, v, **kw)
    return attention_fp8(q, k, v, **kw) if "p_rule" in kw else attention_16(q, k, v, **kw)
