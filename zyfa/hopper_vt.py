"""V^T in the Hopper key order (zyfa.spec.key_order.hopper_vt's bytes) in one Triton launch.

The FP8 kernels on Hopper read V^T with the keys of each 16-key group permuted, which no
strides can express, so V is rewritten on every call. In PyTorch that is a seven-dimensional
permuted copy of bytes (plus a concatenation when the key count is not a multiple of 16);
here each program reads a (64 columns x 256 keys) tile in key order, permutes its keys in
registers and writes it contiguous, zeros past the last key. The spec's function stays the
CPU path and the contract.
Both Hopper paths call it (the generated kernel's host code and the Triton kernel's), so it
lives outside either kernel package, as zyfa.tma does.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .spec.key_order import HOPPER_GROUP

BLOCK_D, BLOCK_K = 64, 256


@triton.jit
def _hopper_vt_kernel(src, dst, seqlen_k, padded_k, kv_heads, dv, stride_b, stride_k, stride_h, stride_d,
                      BLOCK_D: tl.constexpr, BLOCK_K: tl.constexpr):
    bh = tl.program_id(0)
    b, h = bh // kv_heads, bh % kv_heads
    key = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    d = tl.program_id(2) * BLOCK_D + tl.arange(0, BLOCK_D)
    base = src + b.to(tl.int64) * stride_b + h.to(tl.int64) * stride_h
    # keys in their own order, so a load runs along whichever of keys and columns is contiguous
    # (bytes singly through the permutation ran at 480 GB/s, bench/PTX_NOTES.md)
    x = tl.load(base + d[:, None].to(tl.int64) * stride_d + key[None, :].to(tl.int64) * stride_k,
                mask=(d[:, None] < dv) & (key[None, :] < seqlen_k), other=0)
    # key 16 g + 8 h + 2 q + e to slot 16 g + 4 q + 2 h + e: swap the (h, q) axes in registers
    x = tl.reshape(x, (BLOCK_D, BLOCK_K // 16, 2, 4, 2))
    x = tl.reshape(tl.permute(x, (0, 1, 3, 2, 4)), (BLOCK_D, BLOCK_K))
    out = dst + (bh.to(tl.int64) * dv + d[:, None]) * padded_k + key[None, :]
    tl.store(out, x, mask=(d[:, None] < dv) & (key[None, :] < padded_k))


def hopper_vt(v: torch.Tensor) -> torch.Tensor:
    """(B, Hkv, Dv, Sk rounded up to 16) uint8 from v (B, Sk, Hkv, Dv) of one-byte elements,
    any strides: the bytes of zyfa.spec.key_order.hopper_vt(v)."""
    B, Sk, Hkv, Dv = v.shape
    u = v.view(torch.uint8)
    padded = Sk + (-Sk) % HOPPER_GROUP
    out = torch.empty(B, Hkv, Dv, padded, dtype=torch.uint8, device=v.device)
    grid = (B * Hkv, triton.cdiv(padded, BLOCK_K), triton.cdiv(Dv, BLOCK_D))
    _hopper_vt_kernel[grid](u, out, Sk, padded, Hkv, Dv, *u.stride(), BLOCK_D=BLOCK_D, BLOCK_K=BLOCK_K)
    return out
