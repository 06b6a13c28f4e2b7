"""What TMA (Hopper's tensor memory accelerator) asks of a tensor, shared by the Triton and
generated-PTX paths: a 16-byte aligned base, 16-byte multiple strides, innermost dim contiguous;
and V^T in the key order both paths' FP8 kernels read on Hopper."""
from __future__ import annotations

import torch


def tma_aligned(x: torch.Tensor) -> bool:
    e = x.element_size()
    return x.data_ptr() % 16 == 0 and x.stride(-1) == 1 and all((st * e) % 16 == 0 for st in x.stride()[:-1])


def tma_ready(x: torch.Tensor) -> torch.Tensor:
    """x itself when TMA can read it, else a contiguous copy."""
    return x if tma_aligned(x) else x.contiguous()


def permuted_vt(v: torch.Tensor) -> torch.Tensor:
    """V^T as Hopper's FP8 kernels read it: (B, Hkv, Dv, Sk rounded up to 16) bytes, keys
    zero-padded and permuted within each 16-key group (slot s holds key KEY_OF_SLOT[s] of
    zyfa.asm.ptx.fragments), so that P passes from the QK^T wgmma's accumulator registers to the
    P.V wgmma's A operand as it lies."""
    B, Sk, Hkv, Dv = v.shape
    u = v.view(torch.uint8)
    pad = (-Sk) % 16
    if pad:
        u = torch.cat([u, u.new_zeros(B, pad, Hkv, Dv)], dim=1)
    # key 16 g + 8 h + 2 q + e goes to slot 4 q + 2 h + e of group g
    u = u.reshape(B, (Sk + pad) // 16, 2, 4, 2, Hkv, Dv).permute(0, 5, 6, 1, 3, 2, 4)
    return u.reshape(B, Hkv, Dv, Sk + pad)
