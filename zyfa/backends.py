"""The backends zyfa ships, registered fastest first."""
from __future__ import annotations

import ctypes.util
import functools
import importlib.util

import torch

from . import dispatch
from .spec.rules import DEFAULT_P_RULE, LEAN_RULES, P_RULES
from .ops import out_dtype
from .spec.reference import attention_fp64, fp8_attention_spec


def _has_cuda_python() -> bool:
    try:
        return importlib.util.find_spec("cuda") is not None and importlib.util.find_spec("cuda.bindings") is not None
    except ImportError:
        return False


# looked up once: dispatch runs inside torch.compile's trace, which should not import packages
_CUDA_PYTHON = _has_cuda_python()


def _generated_fp8_limits(p: dispatch.Problem, kernel: str, head_dims_ok: bool, head_dims_text: str,
                          ref_rules: tuple = ("block",), p_rules: tuple = LEAN_RULES):
    """What both generated kernels implement: FP8, ``p_rules``, ``ref_rules``, per-head (or
    per-tensor) q/k descales. None if the problem fits, else (False, reason)."""
    if not p.is_fp8:
        return False, f"the {kernel} is FP8 only"
    if not head_dims_ok:
        return False, f"the {kernel} takes head dims {head_dims_text}, not {p.head_dims}"
    if p.p_rule not in p_rules:
        return False, f"the {kernel} implements p_rule {p_rules}, not {p.p_rule!r}"
    if p.ref_rule not in ref_rules:
        return False, f"the {kernel} implements ref_rule {ref_rules}, not {p.ref_rule!r}"
    if p.per_token_descales:
        return False, f"the {kernel} takes per-head (or per-tensor) q/k descales, not per-token"
    return None


def _ptx_ok(p: dispatch.Problem):
    """The generated sm_90a kernel: FP8, head dims (128, 128) or MLA's (192, 128), coarse q/k
    descales, every P rule, block references."""
    if p.device.type != "cuda" or torch.version.hip is not None:
        return False, f"generated PTX runs on NVIDIA GPUs, tensors are on {p.device.type}" + (
            " (ROCm)" if torch.version.hip is not None and p.device.type == "cuda" else "")
    if p.arch != "sm90":
        return False, f"generated PTX targets sm_90a (Hopper), device is {p.arch}"
    refusal = _generated_fp8_limits(p, "generated kernel", p.head_dims in ((128, 128), (192, 128)),
                                    "(128, 128) or (192, 128)", p_rules=P_RULES)
    if refusal:
        return refusal
    if not _CUDA_PYTHON:
        return False, "cuda-python is not installed (pip install 'zyfa[cuda]')"
    return True, f"generated PTX kernel for sm_90a (FP8, d{p.head_dims[0]}/{p.head_dims[1]})"


def _ptx_run(q, k, v, **kw):
    from .asm.ptx.kernels import attention_fp8
    return attention_fp8(q, k, v, **kw)


# whether a HIP runtime library is installed, looked up once (dispatch runs inside traces)
_HIP_RUNTIME = ctypes.util.find_library("amdhip64") is not None


@functools.cache
def _gfx950_fits(head_dim: int, value_dim: int) -> bool:
    """Whether the generated kernel takes these head dims (it must fit a wave's registers)."""
    from .asm.gfx950.attention import HEAD_DIMS, fits
    return head_dim in HEAD_DIMS and value_dim % 32 == 0 and 32 <= value_dim <= 128 and fits(head_dim, value_dim)


def _gfx950_ok(p: dispatch.Problem):
    """The generated gfx950 kernel: FP8, head dims (64|128, 32..128) or (192, 128), coarse
    q/k descales, lean P, block or block_pow2 references; verified in an emulator, never run on hardware."""
    if p.device.type != "cuda" or torch.version.hip is None:
        return False, "generated gfx950 assembly runs on AMD GPUs under ROCm"
    if p.arch != "gfx950":
        return False, f"generated gfx950 assembly targets gfx950 (MI355X), device is {p.arch}"
    refusal = _generated_fp8_limits(p, "generated gfx950 kernel", _gfx950_fits(*p.head_dims),
                                    "64 or 128 (value dims in 32s up to 128) or 192/128",
                                    ref_rules=("block", "block_pow2"))
    if refusal:
        return refusal
    if not _HIP_RUNTIME:
        return False, "the HIP runtime (libamdhip64) is not installed"
    return True, ("generated gfx950 assembly, 8 waves in ping-pong, 64-key blocks (verified in an emulator; "
                  "not yet run on MI355X)")


def _gfx950_run(q, k, v, **kw):
    from .asm.gfx950.kernels import attention_fp8
    return attention_fp8(q, k, v, **kw)


def _capability(arch: str) -> tuple:
    """(major, minor) from an NVIDIA arch string such as "sm90" (Problem.arch: one query per call)."""
    digits = arch[2:]
    return int(digits[:-1]), int(digits[-1])


def _triton_ok(p: dispatch.Problem):
    from .triton_kernels.tuning import interpreter_active
    if p.device.type == "cuda":
        if torch.version.hip is None:
            capability = _capability(p.arch)
            if capability < (8, 0):
                return False, f"Triton kernels need sm_80 or newer, device is {p.arch}"
            if p.is_fp8 and capability < (8, 9):
                return False, f"FP8 needs sm_89 or newer, device is {p.arch}"
        return True, "Triton kernel for this GPU"
    if p.device.type == "cpu" and interpreter_active():
        return True, "Triton interpreter (TRITON_INTERPRET=1), CPU tensors"
    return False, f"tensors on {p.device.type} and the Triton interpreter is off (set TRITON_INTERPRET=1 before import)"


def _triton_run(q, k, v, **kw):
    from .triton_kernels.launch import triton_attention
    return triton_attention(q, k, v, **kw)


def _reference_run(q, k, v, softmax_scale=None, causal=True, q_descale=None, k_descale=None,
                   v_descale=None, p_rule=DEFAULT_P_RULE, ref_rule="block"):
    """The spec for FP8, float64 attention for BF16/FP16 (slow: for checks and the CPU demo)."""
    if q.dtype == torch.float8_e4m3fn:
        out, lse = fp8_attention_spec(q, k, v, q_descale, k_descale, v_descale, causal=causal,
                                      softmax_scale=softmax_scale, p_rule=p_rule, ref_rule=ref_rule,
                                      return_lse=True)
    else:
        out, lse = attention_fp64(q, k, v, causal=causal, softmax_scale=softmax_scale, return_lse=True)
    return out.to(out_dtype(q.dtype)), lse.float()


dispatch.register(dispatch.Backend("ptx", _ptx_ok, _ptx_run))
dispatch.register(dispatch.Backend("gfx950", _gfx950_ok, _gfx950_run))
dispatch.register(dispatch.Backend("triton", _triton_ok, _triton_run))
dispatch.register(dispatch.Backend("reference", lambda p: (True, "float64 / bit-level spec in torch (slow)"),
                                   _reference_run))
