"""The key orders both generated kernels (and the Triton kernel on Hopper) read V^T in.

A kernel writes P in the order its matrix instruction's accumulator holds the scores, and V^T
is stored with its keys in that same order, so P goes from one matrix instruction to the next
without moving between threads. The sums over keys are unchanged; only their order differs.

Hopper (wgmma): within each group of 16 keys, A-operand slot s = 4q + 2h + e holds key
8h + 2q + e (``KEY_OF_SLOT``): a thread's m64nN accumulator holds columns 2q, 2q+1, 8+2q,
9+2q of a group, and the 8-bit A operand wants 4q..4q+3 (zyfa.asm.ptx.fragments).

gfx950 (MFMA 32x32x64): within each 64-key block, byte j of a lane of half h carries key
``key_of_byte(h, j)`` (zyfa.asm.gfx950's scores stage).
"""
from __future__ import annotations

import torch

HOPPER_GROUP = 16
KEY_OF_SLOT = tuple(8 * ((s % 4) // 2) + 2 * (s // 4) + s % 2 for s in range(HOPPER_GROUP))

GFX950_BLOCK = 64


def key_of_byte(half: int, j: int) -> int:
    """The key (within a 64-key block) whose P code byte j of a lane of half ``half`` carries."""
    return 32 * (j // 16) + 8 * ((j % 16) // 4) + 4 * half + j % 4


GFX950_BYTE_ORDER = [key_of_byte(h, j) for h in (0, 1) for j in range(32)]


def hopper_vt(v: torch.Tensor) -> torch.Tensor:
    """V^T as Hopper's FP8 kernels read it: (B, Hkv, Dv, Sk rounded up to 16) bytes from v
    (B, Sk, Hkv, Dv), keys zero-padded and permuted within each 16-key group (slot s holds key
    KEY_OF_SLOT[s])."""
    B, Sk, Hkv, Dv = v.shape
    u = v.view(torch.uint8)
    pad = (-Sk) % HOPPER_GROUP
    if pad:
        u = torch.cat([u, u.new_zeros(B, pad, Hkv, Dv)], dim=1)
    u = u.reshape(B, (Sk + pad) // HOPPER_GROUP, HOPPER_GROUP, Hkv, Dv)[:, :, list(KEY_OF_SLOT)]
    return u.permute(0, 3, 4, 1, 2).reshape(B, Hkv, Dv, Sk + pad)


def slot_order_rows(k: torch.Tensor) -> torch.Tensor | None:
    """The other way to the same pairing: K's rows permuted instead of V^T's keys. k (B, Sk,
    Hkv, D) viewed without a copy as (B Sk / 16, 2, 4, 2, Hkv D): index (g, h, q, e) is key
    16 g + 4 q + 2 h + e, so rows read in the view's order put key s of each 16-key group in
    row KEY_OF_SLOT[s], where the accumulator column that feeds A-operand slot s lands, and V^T
    is read in its own key order. None where strides cannot say it: Sk not a multiple of 16,
    a batch not one run of rows, a head's row not contiguous."""
    B, Sk, Hkv, D = k.shape
    r = k.stride(1)
    if Sk % HOPPER_GROUP or k.stride(3) != 1 or k.stride(2) != D or (B > 1 and k.stride(0) != Sk * r):
        return None
    return k.as_strided((B * Sk // HOPPER_GROUP, 2, 4, 2, Hkv * D), (HOPPER_GROUP * r, 2 * r, 4 * r, r, 1))


def gfx950_vt(v: torch.Tensor) -> torch.Tensor:
    """(..., Sk keys, Dv) E4M3 bytes (uint8) -> (..., Dv, Sk rounded up to 64): in each 64-key
    block, byte 32 h + j of row n is v[key_of_byte(h, j), n] (zeros past Sk): what the lanes
    of half h load."""
    *lead, sk, dv = v.shape
    blocks = -(-sk // GFX950_BLOCK)
    padded = v.new_zeros(*lead, blocks * GFX950_BLOCK, dv)
    padded[..., :sk, :] = v
    x = padded.reshape(*lead, blocks, GFX950_BLOCK, dv)[..., GFX950_BYTE_ORDER, :]
    return x.movedim(-1, -3).reshape(*lead, dv, blocks * GFX950_BLOCK).contiguous()
