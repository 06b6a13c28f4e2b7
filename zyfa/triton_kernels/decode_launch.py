"""Host side of the Triton decode kernel: the key split, the tile, descales, and the launches."""
from __future__ import annotations

import dataclasses
import math

import torch
import triton

from ..device import interpreter_active, sm_count
from ..spec.constants import LOG2E
from ..spec.descales import coarse_descale, is_per_token
from ..spec.shapes import out_dtype
from .decode import NO_DESCALE, PER_HEAD, PER_TOKEN, decode_kernel, merge_kernel

# Programs the split aims for, in multiples of the SM count: more than one a SM, so that each
# SM has loads of several programs in flight while another waits on memory.
WAVES = 2
# Fewest keys a split: a shorter one spends as much on its prologue, epilogue and merge row as
# on its loads.
MIN_SPLIT_KEYS = 512
MAX_SPLITS = 64                  # the merge kernel holds all of a row's partials in registers
# Under the interpreter (no SM count): splits enough that short test sequences leave some empty.
INTERPRETER_SPLITS = 3


@dataclasses.dataclass(frozen=True)
class DecodeTile:
    block_n: int                 # keys a tile
    num_warps: int
    num_stages: int


def default_tile(head_dim: int, page_size: int) -> DecodeTile:
    """64-key tiles (32 at head dim 256, to keep the stages' K and V tiles in shared memory), 4
    warps, 2 stages (the fastest of 18 tiles summed over the three bench shapes on an H100:
    docs/decisions.md); a paged cache's tile no longer than its pages where they are shorter, so
    that a tile still needs one page lookup. The interpreter takes 16 keys: small test lengths
    then cross tiles."""
    if interpreter_active():
        return DecodeTile(16, 4, 1)
    block_n = 32 if head_dim > 128 else 64
    if page_size and page_size < block_n:
        block_n = 16 if page_size % 32 else 32
    return DecodeTile(block_n, 4, 2)


def decode_splits(batch: int, kv_heads: int, max_keys: int, device: torch.device, sm_margin: int = 0) -> int:
    """Key splits a (sequence, kv head): one where batch * kv_heads programs fill WAVES x the
    SMs, else enough to, at least MIN_SPLIT_KEYS keys each (of the longest sequence the cache
    can hold), at most MAX_SPLITS."""
    if interpreter_active() or device.type != "cuda":
        return INTERPRETER_SPLITS
    programs = batch * kv_heads
    want = -(-WAVES * max(sm_count(device) - sm_margin, 1) // programs)
    return max(1, min(want, -(-max_keys // MIN_SPLIT_KEYS), MAX_SPLITS))


def _descale_mode(d, batch: int, kv_heads: int, device):
    """(kernel tensor, mode, per-token row and head strides) of a cache descale."""
    if d is None:
        return None, NO_DESCALE, 0, 0
    d = d.to(device, torch.float32)
    if is_per_token(d):
        d = d.contiguous()
        return d, PER_TOKEN, d.stride(0), d.stride(1)
    return coarse_descale(d, batch, kv_heads, "descale"), PER_HEAD, 0, 0


def triton_decode(q, k_cache, v_cache, cache_seqlens: torch.Tensor, block_table=None, softmax_scale=None,
                  causal=False, q_descale=None, k_descale=None, v_descale=None, num_splits: int = 0,
                  sm_margin: int = 0, tile: DecodeTile | None = None, cache_leftpad=None):
    """Run the decode kernel (inputs validated; cache_seqlens an int32 tensor on q's device,
    block_table too for a paged cache, cache_leftpad (dense only) too). Returns (out (B, Sq, Hq, Dv), lse (B, Hq, Sq) float32)."""
    B, Sq, Hq, D = q.shape
    Hkv, Dv = k_cache.shape[2], v_cache.shape[-1]
    group = Hq // Hkv
    dev = q.device
    page = k_cache.shape[1] if block_table is not None else 0
    tile = tile or default_tile(D, page)
    max_keys = block_table.shape[1] * page if page else k_cache.shape[1]
    splits = num_splits or decode_splits(B, Hkv, max_keys, dev, sm_margin)
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    # Triton's interpreter truncates float32 -> bf16 and multiplies bf16 as raw bits: under it,
    # write float32 and round in torch, and feed the dots float32 operands
    interp = interpreter_active()
    final = out_dtype(q.dtype)
    out = torch.empty(B, Sq, Hq, Dv, dtype=torch.float32 if interp else final, device=dev)
    lse = torch.empty(B, Hq, Sq, dtype=torch.float32, device=dev)
    kd, kd_mode, dr, dh = _descale_mode(k_descale, B, Hkv, dev)
    vd, vd_mode, vdr, vdh = _descale_mode(v_descale, B, Hkv, dev)
    # per-token k and v descales have one shape (validated), contiguous: one set of strides
    dr, dh = (dr, dh) if kd_mode == PER_TOKEN else (vdr, vdh)
    qd = coarse_descale(q_descale.to(dev, torch.float32), B, Hkv, "q_descale") if q_descale is not None else lse
    rows = group * Sq
    if splits > 1:
        o_part = torch.empty(B * Hkv, splits, rows, Dv, dtype=torch.float32, device=dev)
        lse_part = torch.empty(B * Hkv, splits, rows, dtype=torch.float32, device=dev)
    else:
        o_part = lse_part = lse
    table = block_table if block_table is not None else cache_seqlens
    decode_kernel[(splits, B * Hkv)](
        q, k_cache, v_cache, qd, lse if kd is None else kd, lse if vd is None else vd, out, lse, o_part, lse_part,
        cache_seqlens, table, cache_seqlens if cache_leftpad is None else cache_leftpad, q.stride(0), q.stride(1), q.stride(2), k_cache.stride(0), k_cache.stride(1),
        k_cache.stride(2), v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), dr, dh,
        out.stride(0), out.stride(1), out.stride(2), table.stride(0) if block_table is not None else 0,
        splits, Hq, Hkv, scale * LOG2E,
        SQ=Sq, GROUP=group, D=D, DV=Dv, BLOCK_M=max(16, triton.next_power_of_2(rows)), BLOCK_N=tile.block_n,
        PAGE=page, TILE_IN_PAGE=bool(page) and page % tile.block_n == 0, Q_FP8=q_descale is not None,
        KD_MODE=kd_mode, VD_MODE=vd_mode, CAUSAL=causal, SPLIT=splits > 1, UPCAST_DOT=interp,
        HAS_LEFTPAD=cache_leftpad is not None,
        num_warps=tile.num_warps, num_stages=tile.num_stages)
    if splits > 1:
        merge_kernel[(B * Hkv * rows,)](o_part, lse_part, out, lse, splits, Hq, Hkv, out.stride(0), out.stride(1),
                                        out.stride(2), SQ=Sq, GROUP=group, DV=Dv,
                                        SPLITS=triton.next_power_of_2(splits), num_warps=1)
    return out.to(final), lse
