"""What the Triton kernel runs: BF16/FP16 on sm_80+, FP8 on sm_89+, ROCm GPUs, and CPU tensors
under Triton's interpreter; every head dim, P rule, reference rule and descale layout."""
from __future__ import annotations

from ..device import interpreter_active, is_rocm, nvidia_capability


def supports(p) -> tuple[bool, str]:
    """(can run, why) for a zyfa.dispatch.Problem."""
    if p.device.type == "cuda":
        if not is_rocm():
            capability = nvidia_capability(p.arch)
            if capability < (8, 0):
                return False, f"Triton kernels need sm_80 or newer, device is {p.arch}"
            if p.is_fp8 and capability < (8, 9):
                return False, f"FP8 needs sm_89 or newer, device is {p.arch}"
        return True, "Triton kernel for this GPU"
    if p.device.type == "cpu" and interpreter_active():
        return True, "Triton interpreter (TRITON_INTERPRET=1), CPU tensors"
    return False, f"tensors on {p.device.type} and the Triton interpreter is off (set TRITON_INTERPRET=1 before import)"


def run(q, k, v, **kw):
    from .launch import triton_attention
    return triton_attention(q, k, v, **kw)


DECODE_HEAD_DIMS = ((64, 64), (128, 128), (256, 256))   # tl.arange needs powers of two


def supports_decode(p) -> tuple[bool, str]:
    """(can run, why) for a zyfa.dispatch.DecodeProblem."""
    if p.head_dims not in DECODE_HEAD_DIMS:
        return False, f"the decode kernel takes head dims {DECODE_HEAD_DIMS}, got {p.head_dims}"
    return supports(p)


def run_decode(q, k_cache, v_cache, cache_seqlens, block_table=None, **kw):
    from .decode_launch import triton_decode
    return triton_decode(q, k_cache, v_cache, cache_seqlens, block_table, **kw)
