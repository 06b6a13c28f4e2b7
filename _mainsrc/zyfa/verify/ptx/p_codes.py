"""The generated P-code kernel (zyfa.asm.ptx.lean_p.p_codes_kernel) run on the GPU, for
comparing its codes with the spec's bit for bit."""
from __future__ import annotations

import ctypes
import functools

import torch

from ...asm.ptx.assemble import assemble
from ...asm.ptx.lean_p import p_codes_kernel
from ...asm.ptx.loader import Kernel


@functools.cache
def _p_codes(rule: str, arch: str, device: int) -> Kernel:
    name, ptx = p_codes_kernel(rule, arch)
    return Kernel(assemble(ptx, arch).cubin, name, torch.device("cuda", device))


def p_codes(y: torch.Tensor, rule: str) -> torch.Tensor:
    """E4M3 codes (uint8) of 2^(y + 8) under a lean or half-precision rule, computed by the
    generated PTX kernel."""
    if y.device.type != "cuda" or y.dtype != torch.float32:
        raise ValueError(f"y must be a float32 CUDA tensor, got {y.dtype} on {y.device}")
    flat = y.reshape(-1)
    n = flat.numel()
    padded = torch.zeros((n + 3) // 4 * 4, dtype=torch.float32, device=y.device)
    padded[:n] = flat
    out = torch.empty(padded.numel(), dtype=torch.uint8, device=y.device)
    n4 = padded.numel() // 4
    kernel = _p_codes(rule, "sm_90a", y.device.index or 0)
    kernel(((n4 + 255) // 256,), (256,), [ctypes.c_uint64(padded.data_ptr()), ctypes.c_uint64(out.data_ptr()),
                                          ctypes.c_uint32(n4)])
    return out[:n].reshape(y.shape)
