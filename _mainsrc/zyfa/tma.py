"""What TMA (Hopper's tensor memory accelerator) asks of a tensor, shared by the Triton and
generated-PTX paths: a 16-byte aligned base, 16-byte multiple strides, innermost dim contiguous."""
from __future__ import annotations

import torch


def tma_aligned(x: torch.Tensor) -> bool:
    e = x.element_size()
    return x.data_ptr() % 16 == 0 and x.stride(-1) == 1 and all((st * e) % 16 == 0 for st in x.stride()[:-1])


def tma_ready(x: torch.Tensor) -> torch.Tensor:
    """x itself when TMA can read it, else a contiguous copy."""
    return x if tma_aligned(x) else x.contiguous()
