"""flash_attn_with_kvcache's argument checks: every argument's type, shape, dtype and device,
and the values of index tensors given on the CPU (those on the GPU are not read: that would
synchronize). A failing check raises TypeError or ValueError naming the argument."""
from __future__ import annotations

import math

import torch

from .batch_lengths import PAGE_SIZES
from .device import to_device
from .spec.kv_cache import check_cache_descale, uses_fp8_dots
from .validation import FP8_DTYPE, HALF_DTYPES, check_index_tensor, check_pages_in_pool

MAX_QUERIES = 16        # queries a sequence the decode kernel packs into its tile (speculative decoding)


def check_fp8_dots(fp8_dots, k_cache, k_descale, v_descale):
    if fp8_dots is not None and not isinstance(fp8_dots, bool):
        raise TypeError(f"fp8_dots must be None, True or False, got {fp8_dots!r}")
    if fp8_dots and k_cache.dtype != FP8_DTYPE:
        raise ValueError(f"fp8_dots=True takes an E4M3 cache, got {k_cache.dtype}")
    if fp8_dots:
        uses_fp8_dots(k_cache, k_descale, v_descale, fp8_dots)        # raises for per-token descales


def one_table(page_table, block_table):
    if page_table is not None and block_table is not None:
        raise ValueError("pass page_table (FlashAttention-3's name) or block_table (FlashAttention-2's), not both")
    return page_table if page_table is not None else block_table


def _check_4d(name, x):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 4 or x.numel() == 0:
        raise ValueError(f"{name} must be a non-empty 4-D tensor, got shape {tuple(x.shape)}")
    if x.stride(-1) != 1:
        raise ValueError(f"{name} must have a contiguous last dimension, got strides {x.stride()}")


def _int_arg(name, x, low):
    if not isinstance(x, int) or isinstance(x, bool) or x < low:
        raise ValueError(f"{name} must be an int >= {low}, got {x!r}")


def check_call(q, k_cache, v_cache, cache_seqlens, table, q_descale, k_descale, v_descale, softmax_scale, causal,
               num_splits, sm_margin):
    """Validate every argument; returns (cache_seqlens, block table) as int32 tensors on q's device
    (the table None for a dense cache)."""
    for name, x in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        _check_4d(name, x)
    B, Sq, Hq, D = q.shape
    rows, tokens, Hkv, Dk = k_cache.shape
    if not 1 <= Sq <= MAX_QUERIES:
        raise ValueError(f"q has seqlen_q {Sq}; flash_attn_with_kvcache takes 1..{MAX_QUERIES} queries a sequence "
                         "(longer chunks: zyfa.flash_attn_varlen_func over the paged cache)")
    if k_cache.shape[:3] != v_cache.shape[:3]:
        raise ValueError(f"k_cache and v_cache must agree in all but head_dim: k_cache {tuple(k_cache.shape)}, "
                         f"v_cache {tuple(v_cache.shape)}")
    if k_cache.dtype != v_cache.dtype:
        raise TypeError(f"k_cache and v_cache must share one dtype, got {k_cache.dtype} and {v_cache.dtype}")
    fp8 = k_cache.dtype == FP8_DTYPE
    if k_cache.dtype not in HALF_DTYPES + (FP8_DTYPE,):
        raise TypeError(f"k_cache has dtype {k_cache.dtype}; allowed: torch.bfloat16, torch.float16, torch.float8_e4m3fn")
    allowed_q = (torch.bfloat16, FP8_DTYPE) if fp8 else (k_cache.dtype,)
    if q.dtype not in allowed_q:
        raise TypeError(f"q has dtype {q.dtype}; with a {k_cache.dtype} cache q must be "
                        f"{' or '.join(str(t) for t in allowed_q)}")
    if len({q.device, k_cache.device, v_cache.device}) != 1:
        raise ValueError(f"q, k_cache, v_cache must be on one device, got {q.device}, {k_cache.device}, {v_cache.device}")
    if Dk != D:
        raise ValueError(f"q and k_cache must have the same head_dim, got {D} and {Dk}")
    if Hq % Hkv:
        raise ValueError(f"heads ({Hq}) must be divisible by kv_heads ({Hkv}) for GQA/MQA")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    if softmax_scale is not None and not (isinstance(softmax_scale, (int, float)) and not isinstance(softmax_scale, bool)
                                          and 0 < softmax_scale < math.inf):
        raise ValueError(f"softmax_scale must be a positive finite number or None, got {softmax_scale!r}")
    _int_arg("num_splits", num_splits, 0)
    _int_arg("sm_margin", sm_margin, 0)
    if table is None:
        if rows != B:
            raise ValueError(f"a dense k_cache has one row a sequence: batch {rows}, but q has batch {B} "
                             "(cache_batch_idx is not supported)")
        capacity = tokens
    else:
        table = _index_tensor("page_table", table, 2, q.device)
        if table.shape[0] != B:
            raise ValueError(f"page_table has {table.shape[0]} rows but q has batch {B}")
        if tokens not in PAGE_SIZES:
            raise ValueError(f"page_size (k_cache.shape[1]) must be a multiple of 16 in 16..256, got {tokens}")
        capacity = table.shape[1] * tokens
    if cache_seqlens is None:
        if table is not None:
            raise ValueError("a paged cache needs cache_seqlens, (batch,) int32: the keys each sequence uses")
        cache_seqlens = tokens
    if isinstance(cache_seqlens, int) and not isinstance(cache_seqlens, bool):
        cache_seqlens = torch.full((B,), cache_seqlens, dtype=torch.int32)
    host = isinstance(cache_seqlens, torch.Tensor) and cache_seqlens.device.type == "cpu"
    lens = _index_tensor("cache_seqlens", cache_seqlens, 1, None)
    if lens.shape[0] != B:
        raise ValueError(f"cache_seqlens must have shape ({B},), got {tuple(lens.shape)}")
    if host:
        least = Sq if causal else 1
        for i, n in enumerate(lens.tolist()):
            if not least <= n <= capacity:
                raise ValueError(f"cache_seqlens[{i}] is {n}; it must be in {least}..{capacity} (the cache holds "
                                 f"{capacity} keys a sequence" + (f"; causal needs >= seqlen_q {Sq}" if causal else "")
                                 + ")")
        if table is not None and table.device.type == "cpu":
            check_pages_in_pool("page_table", table, [-(-n // tokens) for n in lens.tolist()], rows)
    _check_descales(q, k_cache, v_cache, q_descale, k_descale, v_descale, fp8, B)
    table = None if table is None else to_device(table, q.device)
    return to_device(lens, q.device), table


def check_leftpad(leftpad, cache_seqlens, k_cache, table, least, batch, device):
    """cache_leftpad as an int32 tensor on ``device`` (None if not given): dense caches only;
    checked on the host (CPU tensors): each sequence keeps at least ``least`` keys after it."""
    if leftpad is None:
        return None
    if table is not None:
        raise NotImplementedError("flash_attn_with_kvcache: cache_leftpad takes a dense cache, not a paged one "
                                  "(as in FlashAttention)")
    _index_tensor("cache_leftpad", leftpad, 1, device)
    if leftpad.shape[0] != batch:
        raise ValueError(f"cache_leftpad must have shape ({batch},), got {tuple(leftpad.shape)}")
    if cache_seqlens is None:
        cache_seqlens = k_cache.shape[1]
    ends = None
    if isinstance(cache_seqlens, int):
        ends = [cache_seqlens] * batch
    elif cache_seqlens.device.type == "cpu":
        ends = cache_seqlens.tolist()
    if leftpad.device.type == "cpu":
        for i, n in enumerate(leftpad.tolist()):
            if n < 0 or (ends is not None and n > ends[i] - least):
                raise ValueError(f"cache_leftpad[{i}] is {n}; it must be >= 0 and leave at least {least} key(s) "
                                 "before cache_seqlens (a sequence's keys are [cache_leftpad, cache_seqlens))")
    return to_device(leftpad, device)


def _index_tensor(name, x, dims, device):
    check_index_tensor(name, x, dims)
    if device is not None and x.device.type not in ("cpu", device.type):
        raise ValueError(f"{name} is on {x.device}; pass it on the CPU or on q's device {device}")
    return x


def _check_descales(q, k_cache, v_cache, q_descale, k_descale, v_descale, fp8, batch):
    if not fp8:
        given = [n for n, d in (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale))
                 if d is not None]
        if given:
            raise ValueError(f"{', '.join(given)} given for a {k_cache.dtype} cache; descales apply to E4M3 only")
        return
    missing = [n for n, d in (("k_descale", k_descale), ("v_descale", v_descale)) if d is None]
    if missing:
        raise ValueError(f"an E4M3 cache needs k_descale and v_descale (float32); missing {', '.join(missing)}")
    if (q.dtype == FP8_DTYPE) != (q_descale is not None):
        raise ValueError("q_descale goes with E4M3 q and only with it: got q " + str(q.dtype) +
                         (" without" if q_descale is None else " with") + " q_descale")
    check_cache_descale("k_descale", k_descale, batch, k_cache)
    check_cache_descale("v_descale", v_descale, batch, v_cache)
    if q_descale is not None:
        if q_descale.dim() == 3:
            raise ValueError(f"q_descale has shape {tuple(q_descale.shape)}; decode takes q's descale per "
                             f"(sequence, kv head): (), ({k_cache.shape[2]},) or ({batch}, {k_cache.shape[2]})")
        check_cache_descale("q_descale", q_descale, batch, k_cache)
    for name, d in (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale)):
        if d is not None and d.device != q.device:
            raise ValueError(f"{name} is on {d.device} but q is on {q.device}")
