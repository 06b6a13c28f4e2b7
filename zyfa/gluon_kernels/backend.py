"""What the Gluon decode kernel runs (E4M3 caches on Hopper) and its launch."""
from __future__ import annotations

import math

import torch

from ..decode_splits import decode_splits, merge_splits, split_parts
from ..device import interpreter_active, is_rocm
from ..spec.constants import LOG2E
from ..spec.descales import coarse_descale
from ..spec.shapes import out_dtype

DECODE_HEAD_DIMS = ((128, 128),)


def supports_decode(p) -> tuple[bool, str]:
    """(can run, why) for a zyfa.dispatch.DecodeProblem."""
    if p.device.type != "cuda" or is_rocm() or interpreter_active():
        return False, "the Gluon decode kernel runs on NVIDIA Hopper GPUs (not under Triton's interpreter)"
    if p.arch != "sm90":
        return False, f"the Gluon decode kernel's wgmma needs sm_90, device is {p.arch}"
    if not p.fp8_dots:
        return False, "the Gluon decode kernel takes E4M3 caches with descales per (sequence, kv head)"
    if not p.cache_aligned:
        return False, ("the Gluon decode kernel copies 16-byte pieces: K's and V's base and strides must be "
                       "multiples of 16 bytes")
    if p.head_dims not in DECODE_HEAD_DIMS:
        return False, f"the Gluon decode kernel takes head dims {DECODE_HEAD_DIMS}, got {p.head_dims}"
    from .decode_fp8 import ROWS
    if p.rows > ROWS:
        return False, f"the Gluon decode kernel takes at most {ROWS} rows (GQA group x queries), got {p.rows}"
    return True, "Gluon E4M3 decode kernel for Hopper (keys in the wgmmas' M)"


def splits(batch: int, kv_heads: int, max_keys: int, device: torch.device, sm_margin: int = 0,
           num_splits: int = 0) -> int:
    """Key splits a (sequence, kv head): decode_splits' rule over two programs an SM."""
    return num_splits or decode_splits(batch, kv_heads, max_keys, device, sm_margin, per_sm=2)


def decode_plan(q, k_cache, table, num_splits=0, sm_margin=0) -> str:
    from .decode_fp8 import BLOCK_N, STAGES
    page = k_cache.shape[1] if table is not None else 0
    max_keys = table.shape[1] * page if page else k_cache.shape[1]
    n = splits(q.shape[0], k_cache.shape[2], max_keys, q.device, sm_margin, num_splits)
    return f"{n} key split(s) a (sequence, kv head); {BLOCK_N}-key tiles in {STAGES} cp.async stages, FP8 dots"


def run_decode(q, k_cache, v_cache, cache_seqlens, block_table=None, softmax_scale=None, causal=False,
               q_descale=None, k_descale=None, v_descale=None, num_splits=0, sm_margin=0, cache_leftpad=None,
               fp8_dots=None, out=None):
    """The Triton decode launch's contract (zyfa.triton_kernels.decode_launch.triton_decode) for
    what supports_decode accepts: (out (B, Sq, Hq, Dv), lse (B, Hq, Sq) float32)."""
    del fp8_dots                                  # supports_decode took only calls that run FP8 dots
    from .decode_fp8 import BLOCK_N, NUM_WARPS, ROWS, STAGES, decode_fp8_kernel
    B, Sq, Hq, D = q.shape
    Hkv, Dv = k_cache.shape[2], v_cache.shape[-1]
    group = Hq // Hkv
    dev = q.device
    page = k_cache.shape[1] if block_table is not None else 0
    max_keys = block_table.shape[1] * page if page else k_cache.shape[1]
    n = splits(B, Hkv, max_keys, dev, sm_margin, num_splits)
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    final = out_dtype(q.dtype)
    if out is not None and (tuple(out.shape) != (B, Sq, Hq, Dv) or out.dtype != final):
        raise ValueError(f"out must have shape {(B, Sq, Hq, Dv)} and dtype {final}, got {tuple(out.shape)} {out.dtype}")
    out = torch.empty(B, Sq, Hq, Dv, dtype=final, device=dev) if out is None else out
    lse = torch.empty(B, Hq, Sq, dtype=torch.float32, device=dev)
    # the descales are float32 on q's device (flash_attn_with_kvcache checked them)
    kd, vd = coarse_descale(k_descale, B, Hkv, "k_descale"), coarse_descale(v_descale, B, Hkv, "v_descale")
    qd = coarse_descale(q_descale, B, Hkv, "q_descale") if q_descale is not None else kd
    rows = group * Sq
    o_part, lse_part = split_parts(B, Hkv, n, rows, Dv, lse)
    table = block_table if block_table is not None else cache_seqlens
    decode_fp8_kernel[(n, B * Hkv)](
        q, k_cache, v_cache, qd, kd, vd, out, lse, o_part, lse_part, cache_seqlens, table,
        cache_seqlens if cache_leftpad is None else cache_leftpad,
        q.stride(0), q.stride(1), q.stride(2), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), out.stride(0), out.stride(1), out.stride(2),
        table.stride(0) if block_table is not None else 0, n, Hq, Hkv, scale * LOG2E,
        SQ=Sq, GROUP=group, D=D, DV=Dv, NQ=ROWS, BN=BLOCK_N, STAGES=STAGES, PAGE=page,
        Q_FP8=q_descale is not None, CAUSAL=causal, SPLIT=n > 1, HAS_LEFTPAD=cache_leftpad is not None,
        num_warps=NUM_WARPS.value)
    if n > 1:
        merge_splits(o_part, lse_part, out, lse, n, Hq, Hkv, Sq)
    return out, lse
