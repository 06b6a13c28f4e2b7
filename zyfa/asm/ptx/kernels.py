"""Assembled kernels cached on a literal tuple of every specialization, and their Python calls."""
from __future__ import annotations

import ctypes
import functools
import math

import torch

from ...spec.rules import DEFAULT_P_RULE
from ...spec.descales import head_factor, per_channel_v_descale
from ...spec.key_order import hopper_vt
from ...tma import tma_ready
from . import attention as attn
from .assemble import assemble
from .lean_p import p_codes_kernel
from .loader import Kernel, tensor_map
from .qk_tile import ROWS, qk_tile_kernel


@functools.cache
def _p_codes(rule: str, arch: str, device: int) -> Kernel:
    name, ptx = p_codes_kernel(rule, arch)
    return Kernel(assemble(ptx, arch).cubin, name, torch.device("cuda", device))


def p_codes(y: torch.Tensor, rule: str) -> torch.Tensor:
    """E4M3 codes (uint8) of 2^(y + 8) under a lean or half-precision rule, computed by the
    generated PTX kernel."""
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
    qm = tensor_map(q.view(torch.uint8), (ROWS, 128))
    km = tensor_map(k.view(torch.uint8), (ROWS, 128))
    _qk_tile("sm_90a", q.device.index or 0)((1,), (128,), [qm, km, ctypes.c_uint64(s.data_ptr()),
                                                          ctypes.c_uint32(q_row), ctypes.c_uint32(k_row)])
    return s


@functools.cache
def _attention(rule: str, causal: bool, rowsum: str, schedule: str, dqk: int, arch: str, device: int) -> Kernel:
    name, ptx = attn.attention_kernel(rule, causal, rowsum, arch, schedule, dqk)
    return Kernel(assemble(ptx, arch).cubin, name, torch.device("cuda", device), attn.shared_bytes(schedule, dqk))


def default_schedule(head_dim: int) -> str:
    """The schedule measured fastest on the H200 (bench/PTX_NOTES.md v11-v15): for d128 three
    independent one-warpgroup CTAs an SM ("serial"; the warp-specialized ones within +-3% at
    16K-32K, 8% slower at batch 4 4K); for MLA's Dqk 192, whose K tiles leave room for two
    such CTAs only, the producer / two-consumer kernel without turns ("specialized", +23%)."""
    return "specialized" if head_dim > attn.HEAD_DIM else "serial"


def attention_fp8(q, k, v, softmax_scale=None, causal=True, q_descale=None, k_descale=None, v_descale=None,
                  p_rule=DEFAULT_P_RULE, ref_rule="block", rowsum=None, schedule=None):
    """FP8 attention with head dims (128, 128) or MLA's (192, 128) by the generated sm_90a
    kernel; inputs validated by flash_attn_func (coarse q/k descales, ref_rule "block", any
    P rule). Returns (out BF16, lse float32).

    The row sums of the rounded P: ``rowsum="hmma"`` (the default for the exact and half
    rules) takes them from half-precision wgmmas with float32 accumulation, the same sums as
    ``"alu"`` (the default for the float32 lean rules: float32 on the ALUs, as the spec does);
    ``"mma"`` from FP8 wgmmas against ones, faster but ~1e-3 off from their truncating
    accumulation. ``schedule``: "serial", "pipelined" (Q K^T of the next block overlaps this
    block's softmax), "pingpong" (a producer warpgroup and two consumer warpgroups taking
    turns at the tensor cores), "persistent" or "specialized" (attn.attention_kernel); None
    picks the fastest measured for the head dims (default_schedule). H200 timings of each
    are in bench/PTX_NOTES.md."""
    if rowsum is None:
        rowsum = "hmma" if p_rule in attn.HMMA_RULES else "alu"
    if ref_rule != "block":
        raise ValueError(f"the generated kernel implements ref_rule 'block', got {ref_rule!r}")
    B, Sq, Hq, D = q.shape
    Sk, Hkv, Dv = k.shape[1], k.shape[2], v.shape[-1]
    if (D, Dv) not in attn.HEAD_DIMS:
        raise ValueError(f"the generated kernel takes head dims {attn.HEAD_DIMS}, got ({D}, {Dv})")
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    dev = q.device
    fac = head_factor(q_descale, k_descale, B, Hkv, scale, dev)
    vd = per_channel_v_descale(v_descale.to(dev), B, Hkv, Dv)
    q8, k8 = tma_ready(q.view(torch.uint8)), tma_ready(k.view(torch.uint8))
    vt = hopper_vt(v).reshape(B * Hkv, Dv, -1)
    out = torch.empty(B, Sq, Hq, Dv, dtype=torch.bfloat16, device=dev)
    lse = torch.empty(B, Hq, Sq, dtype=torch.float32, device=dev)
    # boxes of one 128-byte column tile; Dqk 192's columns 128-191 by the tail maps, in boxes
    # of 64 bytes with the 64-byte swizzle (the d128 kernel has the same maps again, unused)
    tail = attn.TAIL if D > attn.HEAD_DIM else attn.HEAD_DIM        # box width = swizzle width
    maps = [tensor_map(q8, (1, attn.BLOCK_M, 1, attn.HEAD_DIM)), tensor_map(k8, (1, attn.BLOCK_N, 1, attn.HEAD_DIM)),
            tensor_map(vt, (1, Dv, attn.BLOCK_N)),
            tensor_map(q8, (1, attn.BLOCK_M, 1, tail), tail), tensor_map(k8, (1, attn.BLOCK_N, 1, tail), tail)]
    ptrs = [ctypes.c_uint64(t.data_ptr()) for t in (out, lse, fac, vd)]
    sizes = [ctypes.c_uint32(n) for n in (Sq, Sk, Hq, Hkv, B)]
    schedule = default_schedule(D) if schedule is None else schedule
    if schedule not in attn.SCHEDULES:
        raise ValueError(f"schedule must be one of {attn.SCHEDULES}, got {schedule!r}")
    kernel = _attention(p_rule, bool(causal), rowsum, schedule, D, "sm_90a",
                        dev.index if dev.index is not None else torch.cuda.current_device())
    if attn.consumers(schedule) == 1:
        grid = (-(-Sq // attn.BLOCK_M), B * Hq)
    else:                                          # a line of CTAs taking 128-row tiles in turn
        tiles = -(-Sq // (2 * attn.BLOCK_M)) * B * Hq
        if schedule == attn.PERSISTENT:
            tiles = min(tiles, torch.cuda.get_device_properties(dev).multi_processor_count)
        grid = (tiles,)
    kernel(grid, (attn.threads(schedule),), maps + ptrs + sizes)
    return out, lse
