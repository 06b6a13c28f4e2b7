"""Decode: a few new queries a sequence over a KV cache, FlashAttention-3's flash_attn_with_kvcache.

The backends are Hopper's E4M3 decode kernel in Gluon (zyfa.gluon_kernels.decode_fp8), the
Triton decode kernel (zyfa.triton_kernels.decode) and float64 attention in torch (the
reference); ``explain_kvcache`` says which one runs and why. A varlen call whose
sequences all have a few queries is not routed here yet: it runs the prefill kernel.
"""
from __future__ import annotations

import math

import torch

from . import dispatch
from .batch_lengths import PAGE_SIZES
from .device import device_arch, to_device
from .gluon_kernels import backend as _gluon
from .spec import backend as _reference
from .spec.kv_cache import check_cache_descale, uses_fp8_dots
from .triton_kernels import backend as _triton
from .validation import FP8_DTYPE, HALF_DTYPES, check_index_tensor, check_pages_in_pool

MAX_QUERIES = 16        # queries a sequence the decode kernel packs into its tile (speculative decoding)

BACKENDS = [dispatch.Backend("gluon", _gluon.supports_decode, _gluon.run_decode),
            dispatch.Backend("triton", _triton.supports_decode, _triton.run_decode),
            dispatch.Backend("reference", _reference.supports_decode, _reference.run_decode)]

# FlashAttention-3 arguments zyfa takes but cannot honour, with the value that means "unused"
_UNSUPPORTED = (("k", None), ("v", None), ("qv", None), ("rotary_cos", None), ("rotary_sin", None),
                ("cache_batch_idx", None), ("cu_seqlens_q", None),
                ("cu_seqlens_k_new", None), ("max_seqlen_q", None), ("rotary_seqlens", None),
                ("window_size", (-1, -1)), ("attention_chunk", 0), ("softcap", 0.0), ("scheduler_metadata", None))


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, page_table=None,
                            cu_seqlens_q=None, cu_seqlens_k_new=None, max_seqlen_q=None, rotary_seqlens=None,
                            q_descale=None, k_descale=None, v_descale=None, softmax_scale=None, causal=False,
                            window_size=(-1, -1), attention_chunk=0, softcap=0.0, rotary_interleaved=True,
                            scheduler_metadata=None, num_splits=0, pack_gqa=None, sm_margin=0,
                            return_softmax_lse=False, *, block_table=None, backend="auto", fp8_dots=None):
    """Attention of 1-16 new queries a sequence over a dense or paged KV cache (forward only).

    FlashAttention-3's argument names, order and defaults (causal=False); what zyfa cannot do
    (appending k/v, rotary, qv, cache_batch_idx, varlen q, windows, chunks,
    soft-capping, scheduler_metadata, pack_gqa=False) raises NotImplementedError naming it.

    q: (batch, seqlen_q, heads, head_dim), seqlen_q 1..16; head dims (64, 64), (128, 128),
    (256, 256). k_cache, v_cache: dense (batch, cache_len, kv_heads, head_dim[_v]), or paged
    (num_pages, page_size, kv_heads, head_dim[_v]) with page_table (FA3's name; block_table,
    FA2's, is the same) (batch, max_pages) int32, page_size a multiple of 16 in 16..256.
    cache_seqlens: int or (batch,) int32, the keys each sequence uses (None: the dense cache's
    cache_len). cache_leftpad (dense caches only, as in FlashAttention): None or (batch,) int32,
    the first key each sequence uses; its keys are then tokens [cache_leftpad[b],
    cache_seqlens[b]) of its row (a left-padded batch). GQA/MQA: query head h reads kv head
    h // (heads // kv_heads); the group's heads share every K/V load. Values are checked where that costs no device synchronization:
    index tensors on the CPU (then copied to q's device) or an int.

    dtypes: q bfloat16/float16 with a cache of the same dtype, or an E4M3 cache (torch.
    float8_e4m3fn) with q bfloat16 or E4M3. E4M3 needs k_descale and v_descale (float32),
    per (sequence, kv head) as FA3 takes them or per token (zyfa.spec.kv_cache), and E4M3 q
    its q_descale ((), (kv_heads,) or (batch, kv_heads)). With k_descale and v_descale per
    (sequence, kv head) the dots run in FP8 as the prefill FP8 path runs them (BF16 q quantized
    to E4M3 a row with a power-of-two descale, P rounded to E4M3 against the running max: the
    spec's fp8_attention_spec with ref_rule "running" over each key split); with per-token
    descales, or fp8_dots=False (keyword only), the cache is computed as a BF16 cache of its
    dequantized values (zyfa.triton_kernels.decode). fp8_dots=True refuses per-token descales.

    causal=True aligns the mask bottom-right as in prefill: query i sees cached keys
    j <= i + cache_seqlens - seqlen_q (the last query sees them all). seqlen_q = 2, 5 keys:

        keys:  0 1 2 3 4
        q0     1 1 1 1 0
        q1     1 1 1 1 1

    num_splits: key splits a (sequence, kv head) (0: chosen from the batch, kv heads and SM
    count; sm_margin SMs left out of that count). The result does not depend on the GPU's
    timing: a launch gives the same bits every run.

    Returns out (batch, seqlen_q, heads, head_dim_v) in bfloat16 (float16 for float16 q) and,
    with return_softmax_lse, the float32 natural-log LSE (batch, heads, seqlen_q).
    """
    del rotary_interleaved                   # applies only with rotary_cos/rotary_sin, refused below
    given = locals()
    for name, unused in _UNSUPPORTED:
        x = given[name]
        if x is not unused and not _is_unused(x, unused):        # `is`: the common case, cheaply
            raise NotImplementedError(f"flash_attn_with_kvcache: zyfa does not support {name} "
                                      f"(got {_describe(x)}; pass {unused!r})")
    if pack_gqa is False:
        raise NotImplementedError("flash_attn_with_kvcache: pack_gqa=False is not supported; zyfa always packs "
                                  "a GQA group's query heads into one tile (pass None or True)")
    table = _one_table(page_table, block_table)
    lens, table = _check(q, k_cache, v_cache, cache_seqlens, table, q_descale, k_descale, v_descale,
                         softmax_scale, causal, num_splits, sm_margin)
    _check_fp8_dots(fp8_dots, k_cache, k_descale, v_descale)
    leftpad = _check_leftpad(cache_leftpad, cache_seqlens, k_cache, table, q.shape[1] if causal else 1, q.shape[0],
                             q.device)
    problem = _problem(q, k_cache, v_cache, table, k_descale, v_descale, fp8_dots)
    chosen = dispatch.select(problem, backend, BACKENDS)
    out, lse = chosen.run(q, k_cache, v_cache, lens, table, softmax_scale=_scale(softmax_scale), causal=causal,
                          q_descale=q_descale, k_descale=k_descale, v_descale=v_descale, num_splits=num_splits,
                          sm_margin=sm_margin, fp8_dots=fp8_dots,
                          **({} if leftpad is None else {"cache_leftpad": leftpad}))
    return (out, lse) if return_softmax_lse else out


def _check_fp8_dots(fp8_dots, k_cache, k_descale, v_descale):
    if fp8_dots is not None and not isinstance(fp8_dots, bool):
        raise TypeError(f"fp8_dots must be None, True or False, got {fp8_dots!r}")
    if fp8_dots and k_cache.dtype != FP8_DTYPE:
        raise ValueError(f"fp8_dots=True takes an E4M3 cache, got {k_cache.dtype}")
    if fp8_dots:
        uses_fp8_dots(k_cache, k_descale, v_descale, fp8_dots)        # raises for per-token descales


def explain_kvcache(q, k_cache, v_cache, cache_seqlens=None, page_table=None, q_descale=None, k_descale=None,
                    v_descale=None, softmax_scale=None, causal=False, num_splits=0, sm_margin=0, *,
                    block_table=None, backend="auto", fp8_dots=None) -> str:
    """Which backend flash_attn_with_kvcache would use for these inputs and why each other would
    not; for the Gluon and Triton kernels also their key splits and tile."""
    table = _one_table(page_table, block_table)
    _, table = _check(q, k_cache, v_cache, cache_seqlens, table, q_descale, k_descale, v_descale,
                      softmax_scale, causal, num_splits, sm_margin)
    _check_fp8_dots(fp8_dots, k_cache, k_descale, v_descale)
    problem = _problem(q, k_cache, v_cache, table, k_descale, v_descale, fp8_dots)
    lines = []
    try:
        chosen = dispatch.select(problem, backend, BACKENDS).name
        lines.append(f"selected: {chosen}")
    except (RuntimeError, ValueError) as e:
        chosen = None
        lines.append(f"selected: none ({e})")
    for name, ok, why in dispatch.assess(problem, BACKENDS):
        lines.append(f"  {name:10s} {'can run' if ok else 'cannot'}: {why}")
    if chosen == "gluon":
        lines.append("  gluon: " + _gluon.decode_plan(q, k_cache, table, num_splits, sm_margin))
    if chosen == "triton":
        lines.append("  triton: " + decode_plan(q, k_cache, table, k_descale, v_descale, num_splits, sm_margin,
                                                 fp8_dots))
    return "\n".join(lines)


def decode_plan(q, k_cache, table, k_descale=None, v_descale=None, num_splits=0, sm_margin=0, fp8_dots=None) -> str:
    """The Triton decode kernel's plan in words: key splits, rows a tile, the tile, its dots."""
    from .triton_kernels.decode_launch import tile_and_splits
    page = k_cache.shape[1] if table is not None else 0
    capacity = table.shape[1] * page if page else k_cache.shape[1]
    fp8_dot = uses_fp8_dots(k_cache, k_descale, v_descale, fp8_dots)
    tile, splits = tile_and_splits(q.shape[-1], page, fp8_dot, q.shape[0], k_cache.shape[2], capacity, q.device,
                                   sm_margin, num_splits)
    if fp8_dot:
        dots = "FP8 dots (q E4M3" + (")" if q.dtype == FP8_DTYPE else ", quantized a row)") + ", P E4M3"
    elif k_cache.dtype == FP8_DTYPE:
        dots = "E4M3 K/V widened to BF16 dots (" + ("fp8_dots=False" if fp8_dots is False else "per-token descales") + ")"
    else:
        dots = f"{k_cache.dtype} dots"
    return (f"{splits} key split(s) a (sequence, kv head) "
            f"({'given' if num_splits else 'chosen from batch, kv heads and SMs'}), "
            f"{q.shape[2] // k_cache.shape[2] * q.shape[1]} query rows a tile, "
            f"{tile}, {dots}")


def _is_unused(x, unused) -> bool:
    if isinstance(x, torch.Tensor) or isinstance(unused, torch.Tensor):
        return False
    if isinstance(unused, tuple):
        return isinstance(x, (tuple, list)) and tuple(x) == unused
    return x == unused if unused is not None else x is None


def _describe(x) -> str:
    return f"a tensor of shape {tuple(x.shape)}" if isinstance(x, torch.Tensor) else repr(x)


def _one_table(page_table, block_table):
    if page_table is not None and block_table is not None:
        raise ValueError("pass page_table (FlashAttention-3's name) or block_table (FlashAttention-2's), not both")
    return page_table if page_table is not None else block_table


def _scale(softmax_scale):
    return None if softmax_scale is None else float(softmax_scale)


def _problem(q, k_cache, v_cache, table, k_descale=None, v_descale=None, fp8_dots=None) -> dispatch.DecodeProblem:
    return dispatch.DecodeProblem(device=q.device, arch=device_arch(q.device), is_fp8=k_cache.dtype == FP8_DTYPE,
                                  head_dims=(q.shape[-1], v_cache.shape[-1]), seqlen_q=q.shape[1],
                                  paged=table is not None, rows=q.shape[2] // k_cache.shape[2] * q.shape[1],
                                  fp8_dots=uses_fp8_dots(k_cache, k_descale, v_descale, fp8_dots),
                                  cache_aligned=all(_aligned16(x) for x in (k_cache, v_cache)))


def _aligned16(x) -> bool:
    bits, e = x.data_ptr(), x.element_size()
    for s in x.stride()[:-1]:
        bits |= s * e                  # 16-byte aligned together: no low four bits set in any
    return bits % 16 == 0


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


def _check(q, k_cache, v_cache, cache_seqlens, table, q_descale, k_descale, v_descale, softmax_scale, causal,
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


def _check_leftpad(leftpad, cache_seqlens, k_cache, table, least, batch, device):
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
