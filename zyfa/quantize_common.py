"""What the PyTorch quantizer (zyfa.quantize) and the fused Triton one
(zyfa.triton_kernels.quantize) share: the result type, the argument checks and the randomized
Hadamard rotation. A module of its own so that neither quantizer imports the other at load
time; zyfa.quantize re-exports all four names."""
from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass
class FP8Inputs:
    """Quantized inputs ready for ``zyfa.flash_attn_func(**x.kwargs())``."""
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    q_descale: torch.Tensor
    k_descale: torch.Tensor
    v_descale: torch.Tensor
    v_rotation: torch.Tensor | None = None     # (Dv, Dv) float32, when v was rotated

    def kwargs(self, rotated_v: bool = False) -> dict:
        """q, k, v and their descales for flash_attn_func. When v was rotated (hadamard=True)
        the attention output is rotated too: pass ``rotated_v=True`` to say you will apply
        ``restore_output`` to it (without it, the output would be silently wrong)."""
        if self.v_rotation is not None and not rotated_v:
            raise ValueError("v was rotated (quantize_fp8(hadamard=True)): the attention output must be rotated "
                             "back with x.restore_output(out); call x.kwargs(rotated_v=True) to confirm")
        return dict(q=self.q, k=self.k, v=self.v, q_descale=self.q_descale,
                    k_descale=self.k_descale, v_descale=self.v_descale)

    def dequantized(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """float64 (q, k, v) as the FP8 values and descales represent them (FlashAttention layout):
        the inputs of a kernel-only error reference."""
        from .spec.reference import dequantize
        from .spec.descales import normalize_descales
        qs, ks, vs = normalize_descales(self.q, self.k, self.v, self.q_descale, self.k_descale, self.v_descale)
        return dequantize(self.q, qs, "q"), dequantize(self.k, ks, "k"), dequantize(self.v, vs, "v")

    def restore_output(self, out: torch.Tensor) -> torch.Tensor:
        """Undo v's rotation on an attention output (identity when v was not rotated)."""
        if self.v_rotation is None:
            return out
        dv = self.v_rotation.shape[0]
        if not isinstance(out, torch.Tensor) or out.dim() != 4 or out.shape[-1] != dv \
                or tuple(out.shape[:2]) != tuple(self.q.shape[:2]):
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ValueError(f"restore_output takes the attention output (batch {self.q.shape[0]}, seqlen_q "
                             f"{self.q.shape[1]}, heads, {dv}), got {got}")
        return (out.float() @ self.v_rotation.T.to(out.device)).to(out.dtype)


def hadamard_matrix(n: int, seed: int = 0, device="cpu") -> torch.Tensor:
    """Orthonormal randomized Hadamard matrix of size n (float64).

    Sylvester Hadamard blocks of the largest power of two dividing n (so 192 uses
    three 64-blocks), with random signs on the rows.
    """
    signs, block, scale = hadamard_parts(n, seed)
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < block:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    full = torch.block_diag(*([h * scale] * (n // block)))
    return (signs[:, None] * full).to(device)


def hadamard_parts(n: int, seed: int = 0):
    """(row signs (n,) float64 of +-1, block size, scale 1/sqrt(block) as a float64 number):
    hadamard_matrix(n, seed) is diag(signs) @ blockdiag(Sylvester(block)) * scale."""
    block = n & -n
    g = torch.Generator().manual_seed(seed)
    signs = torch.randint(0, 2, (n,), generator=g).double() * 2 - 1
    return signs, block, 1.0 / block ** 0.5


def check_inputs(q, k, v, granularity: str, block_size: int, seed: int):
    """The argument checks quantize_fp8 and the fused kernel share; returns B, Sq, Hq, D, Hkv, Dv."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dtype == torch.float8_e4m3fn:
            got = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
            raise TypeError(f"{name} must be a floating-point tensor to quantize (bfloat16, float16, float32), got {got}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    if granularity not in ("head", "tensor", "fine"):
        raise ValueError(f"granularity must be 'head', 'tensor' or 'fine', got {granularity!r}")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.dim() != 4:
            raise ValueError(f"{name} must be 4-D (batch, seqlen, heads, head_dim), got shape {tuple(x.shape)}")
        if x.numel() == 0:
            raise ValueError(f"{name} is empty (shape {tuple(x.shape)}); every dimension must be >= 1")
    if not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be a positive int, got {block_size!r}")
    B, Sq, Hq, D = q.shape
    Hkv, Dv = k.shape[2], v.shape[-1]
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(f"k and v must agree in (batch, seqlen_k, kv_heads): k {tuple(k.shape)}, v {tuple(v.shape)}")
    if k.shape[0] != B:
        raise ValueError(f"q and k must have the same batch size, got q {B}, k {k.shape[0]}")
    if k.shape[-1] != D:
        raise ValueError(f"q and k must have the same head_dim, got q {D}, k {k.shape[-1]}")
    if Hq % Hkv:
        raise ValueError(f"heads ({Hq}) must be divisible by kv_heads ({Hkv})")
    return B, Sq, Hq, D, Hkv, Dv
