"""Assembled kernels cached on a literal tuple of every specialization, and their Python calls."""
from __future__ import annotations

import ctypes
import functools

import torch

from .assemble import assemble
from .lean_p import p_codes_kernel
from .loader import Kernel, tensor_map_2d
from .qk_tile import ROWS, qk_tile_kernel


@functools.cache
def _p_codes(rule: str, arch: str, device: int) -> Kernel:
    name, ptx = p_codes_kernel(rule, arch)
    return Kernel(assemble(ptx, arch).cubin, name, torch.device("cuda", device))


def p_codes(y: torch.Tensor, rule: str) -> torch.Tensor:
    """E4M3 codes (uint8) of 2^(y + 8) under a lean rule, computed by the generated PTX kernel."""
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


@functools.cache
def _qk_tile(arch: str, device: int) -> Kernel:
    name, ptx = qk_tile_kernel(arch)
    return Kernel(assemble(ptx, arch).cubin, name, torch.device("cuda", device))


def qk_tile(q: torch.Tensor, k: torch.Tensor, q_row: int = 0, k_row: int = 0) -> torch.Tensor:
    """S (64 x 64 float32) = q[q_row:+64] . k[k_row:+64]^T for E4M3 q, k of shape (rows, 128),
    by the generated TMA + wgmma kernel (a building block of the attention kernel)."""
    for name, t in (("q", q), ("k", k)):
        if t.dtype != torch.float8_e4m3fn or t.dim() != 2 or t.shape[1] != 128 or not t.is_contiguous():
            raise ValueError(f"{name} must be a contiguous (rows, 128) float8_e4m3fn tensor")
    s = torch.empty(ROWS, ROWS, dtype=torch.float32, device=q.device)
    qm = tensor_map_2d(q.view(torch.uint8), ROWS)
    km = tensor_map_2d(k.view(torch.uint8), ROWS)
    _qk_tile("sm_90a", q.device.index or 0)((1,), (128,), [qm, km, ctypes.c_uint64(s.data_ptr()),
                                                          ctypes.c_uint32(q_row), ctypes.c_uint32(k_row)])
    return s
