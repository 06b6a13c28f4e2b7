"""The attention kernel assembled once per specialization, and its Python call."""
from __future__ import annotations

import ctypes
import functools
import math

import torch

from ...spec.constants import LOG2E
from ...spec.rules import DEFAULT_P_RULE
from ...spec.shapes import Packed
from ...spec.key_order import HOPPER_GROUP, slot_order_rows
from ...spec.descales import (coarse_descale, head_factor, is_per_key_block, is_per_token, key_blocks,
                              per_channel_v_descale, q_row_descales, row_factor)
from ...hopper_vt import hopper_inputs, hopper_vt
from ...tma import tma_ready
from ...device import device_index, host_table, sm_count, to_device
from . import attention as attn
from .assemble import assemble
from .loader import Kernel, tensor_map


@functools.cache
def _attention(rule: str, causal: bool, dqk: int, arch: str, device: int, packed: bool, long: bool,
               ref_rule: str, window: bool = False, slot_keys: bool = False) -> Kernel:
    name, ptx = attn.attention_kernel(rule, causal, dqk, arch, packed, long=long, ref_rule=ref_rule, window=window,
                                      slot_keys=slot_keys)
    return Kernel(assemble(ptx, arch).cubin, name, torch.device("cuda", device),
                  attn.layout_for(dqk, dv=attn.fp8_dv(dqk), packed=packed, long=long,
                                  wide=attn.wide_blocks(rule, ref_rule, window)).shared_bytes)


@functools.cache
def _attention_int8qk(rule: str, causal: bool, dqk: int, arch: str, device: int, window: bool = False,
                      long: bool = False) -> Kernel:
    name, ptx = attn.attention_kernel(rule, causal, dqk, arch, int8_qk=True, long=long, window=window)
    return Kernel(assemble(ptx, arch).cubin, name, torch.device("cuda", device),
                  attn.layout_for(dqk, dv=attn.fp8_dv(dqk), int8_qk=True, long=long).shared_bytes)


@functools.cache
def _attention_16(dtype: str, causal: bool, dqk: int, dv: int, arch: str, device: int, packed: bool,
                  window: bool = False) -> Kernel:
    name, ptx = attn.attention_kernel_16(dtype, causal, dqk, dv, arch, packed, window=window)
    return Kernel(assemble(ptx, arch).cubin, name, torch.device("cuda", device),
                  attn.layout_for(dqk, dtype, dv, packed).shared_bytes)


def window_args(window_size, causal: bool, seqlen_q: int, seqlen_k: int) -> list:
    """A windowed kernel's parameters (layout.WINDOW_PARAMS) for validation.check_window's
    ``window_size``, or [] where there is no window (the default kernels): an unbounded side
    as seqlen_q + seqlen_k + UNBOUNDED_SLACK (the launch's longest lengths: past every key of
    every row, a last tile's rows past seqlen_q too), right 0 where causal."""
    if window_size is None or tuple(window_size) == (-1, -1):
        return []
    left, right = window_size
    right = 0 if causal else right
    return [ctypes.c_uint32(w if w >= 0 else seqlen_q + seqlen_k + UNBOUNDED_SLACK) for w in (left, right)]


UNBOUNDED_SLACK = 256         # rows a tile may reach past seqlen_q (192 at most)


def _batch(q, k, packed: Packed | None, dense_lse: bool = False) -> tuple[int, int, int, list]:
    """(batch, seqlen_q, seqlen_k) the grid and descales go by, and the packed kernel's extra
    arguments (layout.PACKED_PARAMS): a packed batch's tensors are batch 1, (1, total, heads, dim),
    its LSE (1, heads, total); ``dense_lse``: a dense batch as equal sequences, its LSE (B, heads, Sq)."""
    if packed is None:
        return q.shape[0], q.shape[1], k.shape[1], []
    tables = [ctypes.c_uint64(t.data_ptr()) for t in (packed.cu_q, packed.k_start, packed.k_len, packed.v_start)]
    lse_layout = (packed.max_seqlen_q, q.shape[2]) if dense_lse else (q.shape[1], 1)
    return (packed.batch, packed.max_seqlen_q, packed.max_seqlen_k,
            tables + [ctypes.c_uint32(n) for n in lse_layout])


def _grid(layout, Sq: int, B: int, Hq: int, device: torch.device, order=None) -> tuple:
    if layout.tile_counter:                        # one CTA an SM over the tiles: a packed batch's
        # short sequences leave each tile a few blocks, and a CTA's producer loads the next
        # tile's Q and K/V while its consumers finish the last
        return (max(1, min(order[1], sm_count(device))),)
    if layout.specialized:                         # a line of CTAs, one a 128-row tile
        return (-(-Sq // (layout.consumers * attn.BLOCK_M)) * B * Hq,)
    return (-(-Sq // attn.BLOCK_M), B * Hq)


def _tile_order(layout, packed: Packed | None, heads: int, device: torch.device, sms: int | None = None):
    """Layout.tile_counter: (int32s on the device: the counter, zero, then the packed batch's
    non-empty tiles in the order the CTAs draw them (none of packed.written_elsewhere's), each as its number in
    tile_loop.TileLoop's numbering; the number of tiles). The kernel counts in it, so
    launches on different streams never share one; launches on one stream run one after
    another and share one copy a stream (_order_on_device), its counter zeroed before each.
    While a CUDA graph is captured, a copy of the graph's own, which each replay refills from
    pinned host words kept for it. None for other launches. ``sms``: the SMs that draw
    (default: the device's)."""
    if not layout.tile_counter:
        return None
    rows = layout.consumers * attn.BLOCK_M
    sms = sms or sm_count(device)
    q_lens, k_lens = packed.host_lengths()
    q_lens = tuple(0 if i in packed.written_elsewhere else n for i, n in enumerate(q_lens))     # no tiles
    equal = not layout.is_fp8 and len(set(q_lens)) == 1 and len(set(k_lens)) == 1
    tail = (TAIL_PER_SM_EQUAL if equal else TAIL_PER_SM) * sms
    key = (q_lens, k_lens, rows, -(-packed.max_seqlen_q // rows), heads, tail)
    if device.type != "cuda":
        words = to_device(_order_words(*key), device)
    elif torch.cuda.is_current_stream_capturing():
        words = to_device(_pinned_words(*key), device)
    else:
        words = _order_on_device(*key, device, torch.cuda.current_stream(device).cuda_stream)
        words[:1].zero_()
    return words, len(words) - 1


# The last TAIL_PER_SM tiles an SM of a packed launch's order are re-sorted most keys first:
# drawn head after head to the end, the last head's heaviest tiles came among the last and
# the other SMs idled while they ran. A batch of equal sequences (a short dense call takes
# this route) in the 16-bit kernels re-sorts fewer, TAIL_PER_SM_EQUAL: its tiles are ordered
# nearly so already, and a re-sorted tile reads a head's K and V out of order (L2); mixed
# lengths measured slower with 2. Both measured on the H200 (docs/decisions.md).
TAIL_PER_SM = 4
TAIL_PER_SM_EQUAL = 2


@functools.lru_cache(maxsize=16)     # a model's layers call with the same lengths
def _order_on_device(q_lens: tuple, k_lens: tuple, rows: int, per_head: int, heads: int, tail: int,
                     device: torch.device, stream: int) -> torch.Tensor:
    """_order_words on the device, one copy a stream (allocated on it, so the memory of an
    evicted copy is reused only after that stream's launches). A copy a launch cost the
    host 15-36 us and the GPU a host-to-device copy between kernels (on the H200)."""
    return to_device(_order_words(q_lens, k_lens, rows, per_head, heads, tail), device)


@functools.lru_cache(maxsize=16)     # a captured graph's copy reads them at every replay
def _pinned_words(*key) -> torch.Tensor:
    return _order_words(*key).pin_memory()


def _order_words(q_lens: tuple, k_lens: tuple, rows: int, per_head: int, heads: int, tail: int) -> torch.Tensor:
    """_tile_order's words on the host (int32): the sequences most keys first, each
    sequence's heads in turn and each head's query tiles last first (causal: most keys
    first), then the last ``tail`` tiles re-sorted most keys first (TAIL_PER_SM[_EQUAL]). One
    head's tiles in a row keep its K and V in L2 while they run: faster on the H200 than
    (query tile, sequence) slots with heads in a row, most at d64 (docs/decisions.md)."""
    q_lens, k_lens = torch.tensor(q_lens), torch.tensor(k_lens)
    seqs = torch.argsort(-k_lens, stable=True)
    tiles = (q_lens[seqs] + rows - 1) // rows                  # per sequence, in order
    run = tiles * heads                                         # a sequence's words
    seq = torch.repeat_interleave(seqs, run)
    tiles = torch.repeat_interleave(tiles, run)
    j = torch.arange(len(seq)) - torch.repeat_interleave(run.cumsum(0) - run, run)
    head, tile = j // tiles, tiles - 1 - j % tiles
    numbers = (per_head - 1 - tile) * (len(q_lens) * heads) + seq * heads + head
    # keys a tile sees, causal (bottom-right): its sequence's extra keys and its rows' own
    keys = torch.minimum(k_lens[seq], (k_lens[seq] - q_lens[seq]).clamp(min=0) + (tile + 1) * rows)
    last = slice(max(0, len(numbers) - tail), len(numbers))
    numbers[last] = numbers[last][torch.argsort(-keys[last], stable=True)]
    return torch.cat([torch.zeros(1, dtype=torch.int64), numbers]).to(torch.int32)


def _order_args(order) -> list:
    """layout.TILE_COUNTER_PARAMS for a _tile_order (none for other launches)."""
    return [] if order is None else [ctypes.c_uint64(order[0].data_ptr()), ctypes.c_uint32(order[1])]


def _one_byte_maps(q8, k8, vt, block_n: int, k_slots=None) -> list:
    """TMA maps of one-byte q, k (E4M3 or int8) and V^T: boxes of one 128-byte column tile and
    ``block_n`` keys; a 64-byte tile (Dqk 192's columns 128-191, d64's rows) by the tail maps, in
    boxes of 64 bytes with the 64-byte swizzle (kernels without such a tile get the 128-byte maps
    again, unused; d64 the tail maps twice). ``k_slots``: k's slot-order view (key_order.slot_order_rows),
    its boxes a block's 16-key groups."""
    D, Dv = q8.shape[-1], vt.shape[-2]
    tail = attn.TAIL if D % attn.HEAD_DIM else attn.HEAD_DIM        # box width = swizzle width
    col = min(D, attn.HEAD_DIM)
    if k_slots is None:
        k_maps = [tensor_map(k8, (1, block_n, 1, w), w) for w in (col, tail)]
    else:
        k_maps = [tensor_map(k_slots, (block_n // HOPPER_GROUP, 2, 4, 2, w), w) for w in (col, tail)]
    return [tensor_map(q8, (1, attn.BLOCK_M, 1, col), col), k_maps[0],
            tensor_map(vt, (1, Dv, min(block_n, attn.COLUMN_TILE))),
            tensor_map(q8, (1, attn.BLOCK_M, 1, tail), tail), k_maps[1]]


def _slot_rows(k8, packed, long: bool):
    """k's slot-order view for a dense call whose strides allow it, else None: V^T is then read
    in its own order, where quantize_fp8 left it, instead of rewritten in the key order on every
    call. Not for a packed batch (its sequences start at any key), nor for the long d128 layout,
    where the rewrite is under 1% of the call and the slot-order K measured no faster
    (docs/decisions.md)."""
    return slot_order_rows(k8) if packed is None and not long else None


DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "f16"}


# A dense 16-bit call with at most this many keys (by Dqk) runs on the packed kernel: one CTA
# an SM over a tile list, heaviest first, each CTA's producer loading the next tile while its
# consumers finish the last (and at d64 / d128 run a tile's last P V beside the next tile's
# first S), where one CTA a tile pays a launch and a first load per tile. Each limit is the
# longest measured faster than the dense kernel on the H200, outputs bit-equal (docs/decisions.md).
PACKED_ROUTE_KEYS = {64: 4096, 128: 8192, 192: 4096, 256: 4096}


def _uniform_batch(B: int, Sq: int, Sk: int, device: torch.device) -> Packed:
    """A dense batch's tables as a packed batch of B sequences of Sq queries and Sk keys (one
    table, kept on the device a stream: a model's layers call with the same shape)."""
    words = host_table([i * Sq for i in range(B + 1)] + [i * Sk for i in range(B)] + [Sk] * B, device)
    cu_q, k_start, k_len = words[:B + 1], words[B + 1:2 * B + 1], words[2 * B + 1:]
    return Packed(cu_q, k_start, k_start, k_len, Sq, Sk, lengths=((Sq,) * B, (Sk,) * B))


def _flat(x):
    """(B, S, H, D) as (1, B * S, H, D) without a copy, or None where the strides do not allow it."""
    return x.view(1, -1, *x.shape[2:]) if x.shape[0] == 1 or x.stride(0) == x.shape[1] * x.stride(1) else None


def attention_16(q, k, v, softmax_scale=None, causal=True, packed: Packed | None = None, window_size=None):
    """BF16 / FP16 attention with head dims in attn.HEAD_DIMS_16 by the generated sm_90a
    kernel; inputs validated by flash_attn_func. Returns (out in the input type, lse float32).
    ``packed``: q, k, v are a packed batch's tokens as batch 1 (k and v share k_start); out
    (1, total_q, Hq, Dv), lse (1, Hq, total_q). A dense call with at most PACKED_ROUTE_KEYS
    keys runs as a packed batch of equal sequences (its LSE written in the dense layout).
    ``window_size``: (left, right) as validated (validation.check_window), per sequence."""
    B, Sq_total, Hq, D = q.shape
    Hkv, Dv = k.shape[2], v.shape[-1]
    if (D, Dv) not in attn.HEAD_DIMS_16 or q.dtype not in DTYPE_NAMES:
        raise ValueError(f"the generated 16-bit kernel takes head dims {attn.HEAD_DIMS_16} in bf16 / fp16, "
                         f"got ({D}, {Dv}) {q.dtype}")
    dev = q.device
    capturing = dev.type == "cuda" and torch.cuda.is_current_stream_capturing()
    out_shape, lse_shape = (B, Sq_total, Hq, Dv), (B, Hq, Sq_total)
    # not while a CUDA graph is captured: a captured packed launch copies its tile list from the host
    routed = packed is None and k.shape[1] <= PACKED_ROUTE_KEYS.get(D, 0) and not capturing
    if routed:
        flat = [_flat(x) for x in (q, k, v)]
        routed = all(x is not None for x in flat)
        if routed:
            packed = _uniform_batch(B, Sq_total, k.shape[1], dev)
            q, k, v = flat
    B, Sq, Sk, extra = _batch(q, k, packed, dense_lse=routed)
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    dtype = DTYPE_NAMES[q.dtype]
    fac = _constant_factor(scale * LOG2E, B, Hkv, dev, capturing)
    q8, k8, v8 = (tma_ready(x).view(torch.uint8) for x in (q, k, v))
    out = torch.empty(out_shape, dtype=q.dtype, device=dev)
    lse = torch.empty(lse_shape, dtype=torch.float32, device=dev)
    layout = attn.layout_for(D, dtype, Dv, packed is not None)
    col, bn = attn.COLUMN_TILE, layout.block_n   # every tile is 128 bytes wide: no tail maps (passed again, unused)
    q_map, k_map = tensor_map(q8, (1, attn.BLOCK_M, 1, col)), tensor_map(k8, (1, bn, 1, col))
    maps = [q_map, k_map, tensor_map(v8, (1, bn, 1, col)), q_map, k_map]
    ptrs = [ctypes.c_uint64(t.data_ptr()) for t in (out, lse, fac, fac)]
    sizes = [ctypes.c_uint32(n) for n in (Sq, Sk, Hq, Hkv, B)]
    window = window_args(window_size, causal, Sq, Sk)
    kernel = _attention_16(dtype, bool(causal), D, Dv, "sm_90a", device_index(dev), packed is not None, bool(window))
    order = _tile_order(layout, packed, Hq, dev)
    kernel(_grid(layout, Sq, B, Hq, dev, order), (layout.threads,),
           maps + ptrs + sizes + extra + _order_args(order) + window)
    return out, lse


@functools.lru_cache(maxsize=64)     # a model's layers call with the same scale and shape
def _cached_factor(value: float, B: int, Hkv: int, device: torch.device) -> torch.Tensor:
    fac = torch.full((B, Hkv), value, dtype=torch.float32, device=device)
    if device.type == "cuda":     # filled before any stream reads it (once a shape)
        torch.cuda.current_stream(device).synchronize()
    return fac


def _constant_factor(value: float, B: int, Hkv: int, device: torch.device, capturing: bool) -> torch.Tensor:
    """The 16-bit kernel's score factor a (sequence, kv head), softmax_scale * log2(e): one
    tensor a value and shape, only read, so each call does not pay a fill kernel (~10 us of
    host time a call on the H200). A fresh one while a CUDA graph is captured (the
    graph's own memory, filled when the graph runs)."""
    if capturing:
        return torch.full((B, Hkv), value, dtype=torch.float32, device=device)
    return _cached_factor(value, B, Hkv, device)


def attention_fp8(q, k, v, softmax_scale=None, causal=True, q_descale=None, k_descale=None, v_descale=None,
                  p_rule=DEFAULT_P_RULE, ref_rule="block", packed: Packed | None = None, window_size=None):
    """FP8 attention with head dims (64, 64), (128, 128), MLA's (192, 128) or (256, 256) by the
    generated sm_90a kernel; inputs validated by flash_attn_func (coarse q/k descales,
    ref_rule "block" or "running", any P rule). Returns (out BF16, lse float32). The head dims pick the
    schedule and the P rule the row sums (attn.attention_kernel). ``packed``: q, k are a
    packed batch's tokens as batch 1 and v its V^T with sequences at 16-key starts, already
    in the key order (zyfa.hopper_vt.packed_vt's layout with key_order, packed.v_start);
    descales per (sequence, kv head); out (1, total_q, Hq, Dv), lse (1, Hq, total_q).
    ``window_size``: (left, right) as validated (validation.check_window), per sequence."""
    if ref_rule not in attn.REF_RULES:
        raise ValueError(f"the generated kernel implements ref_rule {attn.REF_RULES}, got {ref_rule!r}")
    Sq_total, Hq, D = q.shape[1:]
    Hkv, Dv = k.shape[2], v.shape[-1]
    if (D, Dv) not in attn.HEAD_DIMS:
        raise ValueError(f"the generated kernel takes head dims {attn.HEAD_DIMS}, got ({D}, {Dv})")
    B, Sq, Sk, extra = _batch(q, k, packed)
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    dev = q.device
    q8, k8 = tma_ready(q.view(torch.uint8)), tma_ready(k.view(torch.uint8))
    long = attn.long_keys(D, Dv, Sk, packed is not None)
    k_slots = _slot_rows(k8, packed, long)
    if packed is None:                 # V^T in the key order (slot-order K: its own) and the factors: one launch
        vt, fac, vd = hopper_inputs(v, q_descale, k_descale, v_descale, scale, key_order=k_slots is None)
    else:                              # already in the key order
        vt = v.view(torch.uint8).permute(0, 2, 3, 1)
        fac = head_factor(q_descale, k_descale, B, Hkv, scale, dev)
        vd = per_channel_v_descale(v_descale.to(dev), B, Hkv, Dv)
    vt = vt.reshape(v.shape[0] * Hkv, Dv, -1)
    out = torch.empty(q.shape[0], Sq_total, Hq, Dv, dtype=torch.bfloat16, device=dev)
    lse = torch.empty(q.shape[0], Hq, Sq_total, dtype=torch.float32, device=dev)
    ptrs = [ctypes.c_uint64(t.data_ptr()) for t in (out, lse, fac, vd)]
    sizes = [ctypes.c_uint32(n) for n in (Sq, Sk, Hq, Hkv, B)]
    window = window_args(window_size, causal, Sq, Sk)
    layout = attn.layout_for(D, dv=Dv, packed=packed is not None, long=long,
                             wide=attn.wide_blocks(p_rule, ref_rule, bool(window)))
    maps = _one_byte_maps(q8, k8, vt, layout.block_n, k_slots)
    kernel = _attention(p_rule, bool(causal), D, "sm_90a", device_index(dev), packed is not None, long, ref_rule,
                        bool(window), k_slots is not None)
    order = _tile_order(layout, packed, Hq, dev)
    kernel(_grid(layout, Sq, B, Hq, dev, order), (layout.threads,),
           maps + ptrs + sizes + extra + _order_args(order) + window)
    return out, lse


def attention_int8qk(q, k, v, softmax_scale=None, causal=True, q_descale=None, k_descale=None, v_descale=None,
                     p_rule=DEFAULT_P_RULE, ref_rule="block", window_size=None):
    """The INT8 Q.K^T mode by the generated sm_90a kernel (the E4M3 kernel's schedule for the
    head dims); inputs validated by flash_attn_func: q (B, Sq, Hq, D) and k (B, Sk, Hkv, D) int8
    with (D, Dv) in attn.HEAD_DIMS, v E4M3 as quantize_int8_qk writes it; q's descales any
    form, k's a block of 128 keys (B, Hkv, ceil(Sk / 128)) or coarser. Returns (out BF16, lse
    float32)."""
    B, Sq, Hq, D = q.shape
    Sk, Hkv, Dv = k.shape[1], k.shape[2], v.shape[-1]
    if ref_rule != "block":
        raise ValueError(f"the generated kernel implements ref_rule 'block', got {ref_rule!r}")
    if q.dtype != torch.int8 or k.dtype != torch.int8 or (D, Dv) not in attn.HEAD_DIMS:
        raise ValueError(f"the INT8 Q.K^T kernel takes int8 q and k with head dims {attn.HEAD_DIMS}, "
                         f"got {q.dtype} / {k.dtype} ({D}, {Dv})")
    if k_descale.dim() == 3 and not is_per_key_block(k_descale, Sk):
        raise ValueError("the INT8 Q.K^T kernel takes k descales a block of 128 keys or coarser, not a key")
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    dev = q.device
    blocks = key_blocks(Sk)
    if is_per_token(q_descale) or is_per_token(k_descale):     # c = row factor x k's block descale
        fac = row_factor(q_row_descales(q_descale.to(dev, torch.float32), B, Hq, Hkv, Sq), scale).contiguous()
        kd = k_descale if k_descale.dim() == 3 else coarse_descale(k_descale.to(dev), B, Hkv, "k_descale")[..., None]
    else:                                                       # c = the head's factor, as the spec forms it
        head = head_factor(q_descale, k_descale, B, Hkv, scale, dev).repeat_interleave(Hq // Hkv, dim=1)
        fac = head[..., None].expand(B, Hq, Sq).contiguous()
        kd = torch.ones((), device=dev)
    kfac = kd.to(dev, torch.float32).expand(B, Hkv, blocks).contiguous()
    vd = per_channel_v_descale(v_descale.to(dev), B, Hkv, Dv)
    q8, k8 = tma_ready(q.view(torch.uint8)), tma_ready(k.view(torch.uint8))
    vt = hopper_vt(v).reshape(B * Hkv, Dv, -1)      # not slot-order K: measured slower at GQA 16K (docs/decisions.md)
    out = torch.empty(B, Sq, Hq, Dv, dtype=torch.bfloat16, device=dev)
    lse = torch.empty(B, Hq, Sq, dtype=torch.float32, device=dev)
    ptrs = [ctypes.c_uint64(t.data_ptr()) for t in (out, lse, fac, vd)]
    sizes = [ctypes.c_uint32(n) for n in (Sq, Sk, Hq, Hkv, B)]
    long = attn.long_keys(D, Dv, Sk)
    layout = attn.layout_for(D, dv=Dv, int8_qk=True, long=long)
    maps = _one_byte_maps(q8, k8, vt, layout.block_n)
    window = window_args(window_size, causal, Sq, Sk)
    kernel = _attention_int8qk(p_rule, bool(causal), D, "sm_90a", device_index(dev), bool(window), long)
    kernel(_grid(layout, Sq, B, Hq, dev), (layout.threads,),
           maps + ptrs + sizes + [ctypes.c_uint64(kfac.data_ptr())] + window)
    return out, lse
