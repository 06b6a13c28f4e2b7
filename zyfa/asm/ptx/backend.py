"""What the generated sm_90a kernel runs: FP8 on Hopper, head dims (128, 128) or MLA's
(192, 128), per-head (or per-tensor) q/k descales, every P rule, block references; it needs
cuda-python to load."""
from __future__ import annotations

from ...device import HAS_CUDA_PYTHON, is_rocm
from ...spec.rules import P_RULES
from ..limits import fp8_refusal
from .layout import HEAD_DIMS


def supports(p) -> tuple[bool, str]:
    """(can run, why) for a zyfa.dispatch.Problem."""
    if p.device.type != "cuda" or is_rocm():
        return False, f"generated PTX runs on NVIDIA GPUs, tensors are on {p.device.type}" + (
            " (ROCm)" if is_rocm() and p.device.type == "cuda" else "")
    if p.arch != "sm90":
        return False, f"generated PTX targets sm_90a (Hopper), device is {p.arch}"
    refusal = fp8_refusal(p, "generated kernel", p.head_dims in HEAD_DIMS, " or ".join(map(str, HEAD_DIMS)),
                          P_RULES, ("block",))
    if refusal:
        return refusal
    if not HAS_CUDA_PYTHON:
        return False, "cuda-python is not installed (pip install 'zyfa[cuda]')"
    return True, f"generated PTX kernel for sm_90a (FP8, d{p.head_dims[0]}/{p.head_dims[1]})"


def run(q, k, v, **kw):
    from .kernels import attention_fp8
    return attention_fp8(q, k, v, **kw)
