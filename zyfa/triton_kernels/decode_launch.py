"""Host side of the Triton decode kernel: the key split, the tile, descales, and the launches."""
from __future__ import annotations

import dataclasses
import math

import torch

from ..device import hardware_rounding, interpreter_active, sm_count
from ..launch_sizes import next_power_of_2
from ..spec.constants import LOG2E
from ..spec.descales import coarse_descale, is_per_token
from ..spec.kv_cache import uses_fp8_dots
from ..spec.shapes import out_dtype
from ..decode_splits import WAVES, decode_splits, merge_splits, split_parts
from .decode import NO_DESCALE, PER_HEAD, PER_TOKEN, decode_kernel

# Most page lookups a tile (one a page); a tile of more pages looks its keys up one by one.
MAX_PAGE_LOOKUPS = 8
@dataclasses.dataclass(frozen=True)
class DecodeTile:
    block_n: int                 # keys a tile
    num_warps: int
    num_stages: int
    # least rows a tile (a GQA group's query rows padded up to it): 16 takes Triton's mma.sync
    # path, 64 its wgmma path (with FP8 dots, V's keys transposed into shared memory on the way)
    block_m: int = 16
    # programs an SM holds at once (the tile's registers: 128 threads each); decode_splits
    # counts a round of programs in these slots. 1: as if an SM ran one at a time
    per_sm: int = 1
    # a tile of whole pages looks up each page (pages_a_tile) rather than each key: fewer loads,
    # more registers (the 16-bit tile then holds one program fewer an SM: it gathers a key at a time)
    page_lookups: bool = True


def default_tile(head_dim: int, fp8_dot: bool = False, fills_gpu: bool = False) -> DecodeTile:
    """16-bit caches: 64-key tiles (32 at head dim 256, to keep the stages' K and V tiles in
    shared memory), 4 warps, 2 stages (the fastest of 18 tiles summed over the three bench shapes
    on an H100: docs/decisions.md), dense or paged (shorter pages gathered a key at a time).
    FP8 dots: at head dim 128, 64 keys in 3 stages (three programs an SM) unless the batch fills
    the GPU without splits (``fills_gpu``: 128 keys, 3 stages, two an SM); 128 keys at 64, 32 at
    256 (64 keys at 32 rows spill), never fewer than 32 (the FP8 MMA's reduction takes 32 keys);
    pages shorter than the tile looked up a page at a time (docs/decisions.md). ``per_sm`` as
    compiled for sm_90a (a test holds it to the registers). The interpreter takes 16 keys: small
    test lengths then cross tiles."""
    if interpreter_active():
        return DecodeTile(16, 4, 1)
    if fp8_dot:
        if head_dim > 128:
            return DecodeTile(32, 4, 2)
        if head_dim <= 64:
            return DecodeTile(128, 4, 3, per_sm=3)
        return DecodeTile(128, 4, 3, per_sm=2) if fills_gpu else DecodeTile(64, 4, 3, per_sm=3)
    return DecodeTile(32 if head_dim > 128 else 64, 4, 2, page_lookups=False)


def tile_and_splits(head_dim: int, page: int, fp8_dot: bool, batch: int, kv_heads: int, max_keys: int,
                    device: torch.device, sm_margin: int = 0, num_splits: int = 0,
                    tile: DecodeTile | None = None) -> tuple[DecodeTile, int]:
    """The launch's tile (default_tile unless given) and key splits (decode_splits over the
    tile's programs an SM unless given): what triton_decode runs and explain_kvcache says."""
    if tile is None:
        fills = device.type == "cuda" and batch * kv_heads >= WAVES * max(sm_count(device) - sm_margin, 1)
        tile = default_tile(head_dim, fp8_dot, fills_gpu=fills)
    return tile, num_splits or decode_splits(batch, kv_heads, max_keys, device, sm_margin, per_sm=tile.per_sm)


def pages_a_tile(page: int, tile: DecodeTile) -> int:
    """The key tile's page lookups as the kernel's tile_cache_rows takes them: 1 where the tile lies in
    one page, n where it is n whole pages (a lookup a page, for a tile with page_lookups), 0 (a
    lookup a key) otherwise, where a tile would span more than MAX_PAGE_LOOKUPS, or dense."""
    if not page:
        return 0
    if page % tile.block_n == 0:
        return 1
    n = tile.block_n // page
    return n if tile.page_lookups and tile.block_n % page == 0 and n <= MAX_PAGE_LOOKUPS else 0


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
                  sm_margin: int = 0, tile: DecodeTile | None = None, cache_leftpad=None, fp8_dots=None, out=None):
    """Run the decode kernel (inputs validated; cache_seqlens an int32 tensor on q's device,
    block_table too for a paged cache, cache_leftpad (dense only) too; fp8_dots: uses_fp8_dots).
    Returns (out (B, Sq, Hq, Dv), lse (B, Hq, Sq) float32); ``out``: a tensor of that shape and
    the output dtype (a view into a packed output, say) that receives the output."""
    B, Sq, Hq, D = q.shape
    Hkv, Dv = k_cache.shape[2], v_cache.shape[-1]
    group = Hq // Hkv
    dev = q.device
    page = k_cache.shape[1] if block_table is not None else 0
    fp8_dot = uses_fp8_dots(k_cache, k_descale, v_descale, fp8_dots)
    max_keys = block_table.shape[1] * page if page else k_cache.shape[1]
    tile, splits = tile_and_splits(D, page, fp8_dot, B, Hkv, max_keys, dev, sm_margin, num_splits, tile)
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    # Triton's interpreter truncates float32 -> bf16 and multiplies bf16 as raw bits: under it,
    # write float32 and round in torch, and feed the dots float32 operands
    interp = interpreter_active()
    final = out_dtype(q.dtype)
    given = out
    if given is not None and (tuple(given.shape) != (B, Sq, Hq, Dv) or given.dtype != final):
        raise ValueError(f"out must have shape {(B, Sq, Hq, Dv)} and dtype {final}, got {tuple(given.shape)} {given.dtype}")
    if given is None or interp:
        out = torch.empty(B, Sq, Hq, Dv, dtype=torch.float32 if interp else final, device=dev)
    lse = torch.empty(B, Hq, Sq, dtype=torch.float32, device=dev)
    kd, kd_mode, dr, dh = _descale_mode(k_descale, B, Hkv, dev)
    vd, vd_mode, vdr, vdh = _descale_mode(v_descale, B, Hkv, dev)
    # per-token k and v descales have one shape (validated), contiguous: one set of strides
    dr, dh = (dr, dh) if kd_mode == PER_TOKEN else (vdr, vdh)
    qd = coarse_descale(q_descale.to(dev, torch.float32), B, Hkv, "q_descale") if q_descale is not None else lse
    rows = group * Sq
    o_part, lse_part = split_parts(B, Hkv, splits, rows, Dv, lse)
    table = block_table if block_table is not None else cache_seqlens
    decode_kernel[(splits, B * Hkv)](
        q, k_cache, v_cache, qd, lse if kd is None else kd, lse if vd is None else vd, out, lse, o_part, lse_part,
        cache_seqlens, table, cache_seqlens if cache_leftpad is None else cache_leftpad, q.stride(0), q.stride(1), q.stride(2), k_cache.stride(0), k_cache.stride(1),
        k_cache.stride(2), v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), dr, dh,
        out.stride(0), out.stride(1), out.stride(2), table.stride(0) if block_table is not None else 0,
        splits, Hq, Hkv, scale * LOG2E,
        SQ=Sq, GROUP=group, D=D, DV=Dv, BLOCK_M=max(tile.block_m, next_power_of_2(rows)), BLOCK_N=tile.block_n,
        PAGE=page, PAGES_A_TILE=pages_a_tile(page, tile), Q_FP8=q_descale is not None,
        KD_MODE=kd_mode, VD_MODE=vd_mode, CAUSAL=causal, SPLIT=splits > 1, UPCAST_DOT=interp,
        HAS_LEFTPAD=cache_leftpad is not None, FP8_DOT=fp8_dot, HW_ROUND=fp8_dot and hardware_rounding(dev),
        num_warps=tile.num_warps, num_stages=tile.num_stages)
    if splits > 1:
        merge_splits(o_part, lse_part, out, lse, splits, Hq, Hkv, Sq)
    if given is not None:
        return (given.copy_(out) if interp else given), lse
    return out.to(final), lse
