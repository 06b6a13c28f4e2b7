"""Descale tensors: the shapes flash_attn_func accepts and their normalized forms.

Accepted (float32; for q the GQA group shares the kv head's scale, as in FA3):

  q_descale: scalar | (kv_heads,) | (batch, kv_heads)  | (batch, heads, seqlen_q)   per token
  k_descale: scalar | (kv_heads,) | (batch, kv_heads)  | (batch, kv_heads, seqlen_k) per token
             | (batch, kv_heads, ceil(seqlen_k / 128)) per block of 128 keys (KEY_BLOCK)
  v_descale: scalar | (kv_heads,) | (batch, kv_heads)  | (batch, kv_heads, head_dim_v) per channel

Normalized: q (B, Hq, Sq), k (B, Hkv, Sk), v (B, Hkv, Dv), all float32 (a block's descale
repeated over its keys). The block form is what lets a kernel take one k factor a key block
(the generated INT8 Q.K^T kernel); with one block (seqlen_k <= 128) it is the per-token shape
only at seqlen_k 1, where both mean the same.
"""
from __future__ import annotations

import torch

from .constants import KEY_BLOCK, LOG2E


def coarse_view(d: torch.Tensor, B: int, Hkv: int, name: str) -> torch.Tensor:
    """scalar | (Hkv,) | (B, Hkv) -> (B, Hkv)."""
    if d.dim() == 0:
        return d.reshape(1, 1).expand(B, Hkv)
    if d.dim() == 1 and d.shape[0] == Hkv:
        return d.reshape(1, Hkv).expand(B, Hkv)
    if d.dim() == 2 and tuple(d.shape) == (B, Hkv):
        return d
    raise ValueError(_shape_msg(name, d, B, Hkv))


def _shape_msg(name, d, B, Hkv, fine=None):
    allowed = f"(), ({Hkv},), ({B}, {Hkv})"
    if fine is not None:
        allowed += f" or {fine}"
    return f"{name} has shape {tuple(d.shape)}; allowed shapes are {allowed}"


def key_blocks(seqlen_k: int) -> int:
    """Blocks of KEY_BLOCK keys: the last dimension of a k descale per key block."""
    return -(-seqlen_k // KEY_BLOCK)


def is_per_key_block(d, seqlen_k: int) -> bool:
    """A (validated) k descale per block of KEY_BLOCK keys rather than per token."""
    return d is not None and d.dim() == 3 and d.shape[-1] != seqlen_k


def check_descale(name: str, d, B: int, Hkv: int, fine_shape: tuple, block_shape: tuple | None = None) -> None:
    """Raise TypeError/ValueError if a descale has the wrong type, dtype or shape
    (``block_shape``: k's per-key-block shape, also allowed)."""
    if not isinstance(d, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of float32, got {type(d).__name__}")
    if d.dtype != torch.float32:
        raise TypeError(f"{name} must be float32, got {d.dtype}")
    if d.dim() == 3:
        if tuple(d.shape) not in (tuple(fine_shape), tuple(block_shape or fine_shape)):
            fine = f"{fine_shape}" + (f" or {block_shape} (a block of {KEY_BLOCK} keys)" if block_shape else "")
            raise ValueError(_shape_msg(name, d, B, Hkv, fine))
        return
    coarse_view(d, B, Hkv, name)   # raises on a bad shape


def is_per_token(d) -> bool:
    return d is not None and d.dim() == 3


def normalize_descales(q, k, v, q_descale=None, k_descale=None, v_descale=None):
    """Expand descales to q (B, Hq, Sq), k (B, Hkv, Sk), v (B, Hkv, Dv) float32.

    Missing descales mean 1.0 (the reference accepts that; flash_attn_func requires
    them for FP8 inputs).
    """
    B, Sq, Hq, _ = q.shape
    Sk, Hkv, Dv = k.shape[1], k.shape[2], v.shape[-1]
    dev = q.device
    one = torch.ones((), dtype=torch.float32, device=dev)
    qd = one if q_descale is None else q_descale.to(dev, torch.float32)
    kd = one if k_descale is None else k_descale.to(dev, torch.float32)
    vd = one if v_descale is None else v_descale.to(dev, torch.float32)
    qs = q_row_descales(qd, B, Hq, Hkv, Sq)
    if kd.dim() != 3:
        ks = coarse_view(kd, B, Hkv, "k_descale")[..., None].expand(B, Hkv, Sk)
    else:
        ks = kd.repeat_interleave(KEY_BLOCK, -1)[..., :Sk] if is_per_key_block(kd, Sk) else kd
    return qs, ks.contiguous(), per_channel_v_descale(vd, B, Hkv, Dv)


def q_row_descales(qd: torch.Tensor, B: int, Hq: int, Hkv: int, Sq: int) -> torch.Tensor:
    """q's descales (float32 on q's device, any validated form) as (B, Hq, Sq) contiguous:
    normalize_descales' q alone, for kernels that take a row's factor and nothing else of it."""
    if qd.dim() == 3:
        return qd.contiguous()
    group = Hq // Hkv
    return coarse_view(qd, B, Hkv, "q_descale").repeat_interleave(group, dim=1)[..., None].expand(B, Hq, Sq).contiguous()


def head_factor(q_descale: torch.Tensor, k_descale: torch.Tensor, B: int, Hkv: int, softmax_scale: float,
                device) -> torch.Tensor:
    """c = (dq * dk) * (softmax_scale * log2 e) per (batch, kv head), float32 (B, Hkv): the
    factor from raw FP8 dot products to the log2 domain for per-head (or per-tensor) descales,
    formed as the spec and every kernel form it."""
    qd = coarse_descale(q_descale.to(device), B, Hkv, "q_descale")
    kd = coarse_descale(k_descale.to(device), B, Hkv, "k_descale")
    return ((qd * kd) * (softmax_scale * LOG2E)).float().contiguous()


def row_factor(qs: torch.Tensor, softmax_scale: float) -> torch.Tensor:
    """(B, Hq, Sq) float32: q's per-token descales (normalize_descales' form) times
    softmax_scale * log2 e, the row factor of per-token descales (a score's factor is it times
    the key's descale), formed as the spec and every kernel form it."""
    return (qs * (softmax_scale * LOG2E)).float()


def per_channel_v_descale(vd: torch.Tensor, B: int, Hkv: int, Dv: int) -> torch.Tensor:
    """v_descale as (B, Hkv, Dv) float32 contiguous."""
    vs = vd if vd.dim() == 3 else coarse_view(vd, B, Hkv, "v_descale")[..., None].expand(B, Hkv, Dv)
    return vs.float().contiguous()


def coarse_descale(d: torch.Tensor, B: int, Hkv: int, name: str) -> torch.Tensor:
    """(B, Hkv) float32 contiguous form of a coarse descale (for the kernels)."""
    return coarse_view(d, B, Hkv, name).contiguous()
