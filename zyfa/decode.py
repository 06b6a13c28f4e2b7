"""Decode: a few new queries a sequence over a KV cache, FlashAttention-3's flash_attn_with_kvcache.

The backends are Hopper's E4M3 decode kernel in Gluon (zyfa.gluon_kernels.decode_fp8), the
Triton decode kernel (zyfa.triton_kernels.decode) and float64 attention in torch (the
reference); ``explain_kvcache`` says which one runs and why, and ``plan_kvcache`` makes a
call's checks and choice once for the layers of a decoding step (its arguments' checks:
zyfa.decode_checks).
"""
from __future__ import annotations

import dataclasses

import torch

from . import dispatch
from .decode_checks import check_call, check_fp8_dots, check_leftpad, one_table
from .device import device_arch
from .gluon_kernels import backend as _gluon
from .spec import backend as _reference
from .spec.kv_cache import uses_fp8_dots
from .triton_kernels import backend as _triton
from .validation import FP8_DTYPE

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
    chosen, lens, table, kwargs = _checked(q, k_cache, v_cache, cache_seqlens, cache_leftpad, page_table, block_table,
                                           q_descale, k_descale, v_descale, softmax_scale, causal, num_splits,
                                           sm_margin, backend, fp8_dots)
    out, lse = chosen.run(q, k_cache, v_cache, lens, table, q_descale=q_descale, k_descale=k_descale,
                          v_descale=v_descale, **kwargs)
    return (out, lse) if return_softmax_lse else out


def plan_kvcache(q, k_cache, v_cache, *, cache_seqlens=None, cache_leftpad=None, page_table=None, q_descale=None,
                 k_descale=None, v_descale=None, softmax_scale=None, causal=False, num_splits=0, sm_margin=0,
                 block_table=None, backend="auto", fp8_dots=None) -> KVCachePlan:
    """flash_attn_with_kvcache's checks and choices made once, for calls that differ only in
    the data of q, the cache and the descales: the layers of one decoding step. The plan's
    ``run(q, k_cache, v_cache, q_descale=None, k_descale=None, v_descale=None,
    return_softmax_lse=False)`` compares each tensor's layout (shape, strides, dtype, device,
    16-byte alignment) with the one planned, raising ValueError on a difference, and launches;
    it skips the checks and the backend's choice, the host work a call spends before its
    launches. cache_seqlens, page_table and cache_leftpad are the plan's: run reads the tensors
    given here (their values on the GPU as they are at each launch, as a CUDA graph would).
    The arguments are flash_attn_with_kvcache's, by keyword past v_cache; ``plan.backend``
    names the backend chosen."""
    chosen, lens, table, kwargs = _checked(q, k_cache, v_cache, cache_seqlens, cache_leftpad, page_table, block_table,
                                           q_descale, k_descale, v_descale, softmax_scale, causal, num_splits,
                                           sm_margin, backend, fp8_dots)
    return KVCachePlan(chosen.name, chosen.run, _layouts(q, k_cache, v_cache, q_descale, k_descale, v_descale), lens,
                       table, kwargs)


def _checked(q, k_cache, v_cache, cache_seqlens, cache_leftpad, page_table, block_table, q_descale, k_descale,
             v_descale, softmax_scale, causal, num_splits, sm_margin, backend, fp8_dots):
    """Every check of a call and the backend's choice: (the backend, cache_seqlens and the
    page table on q's device, the rest of run's keyword arguments)."""
    table = one_table(page_table, block_table)
    lens, table = check_call(q, k_cache, v_cache, cache_seqlens, table, q_descale, k_descale, v_descale,
                             softmax_scale, causal, num_splits, sm_margin)
    check_fp8_dots(fp8_dots, k_cache, k_descale, v_descale)
    leftpad = check_leftpad(cache_leftpad, cache_seqlens, k_cache, table, q.shape[1] if causal else 1, q.shape[0],
                            q.device)
    chosen = dispatch.select(_problem(q, k_cache, v_cache, table, k_descale, v_descale, fp8_dots), backend, BACKENDS)
    kwargs = dict(softmax_scale=_scale(softmax_scale), causal=causal, num_splits=num_splits, sm_margin=sm_margin,
                  fp8_dots=fp8_dots, **({} if leftpad is None else {"cache_leftpad": leftpad}))
    return chosen, lens, table, kwargs


@dataclasses.dataclass(frozen=True, eq=False)
class KVCachePlan:
    """A checked flash_attn_with_kvcache call without its tensors' data (plan_kvcache)."""
    backend: str
    _run: object = dataclasses.field(repr=False)                  # the chosen backend's run
    _layouts: tuple = dataclasses.field(repr=False)               # q, k_cache, v_cache, q_descale, k_descale, v_descale
    _lens: torch.Tensor = dataclasses.field(repr=False)           # cache_seqlens, int32 on q's device
    _table: torch.Tensor | None = dataclasses.field(repr=False)   # the page table, int32 on q's device (None: dense)
    _kwargs: dict = dataclasses.field(repr=False)                 # the rest of the backend's arguments

    def run(self, q, k_cache, v_cache, q_descale=None, k_descale=None, v_descale=None, return_softmax_lse=False):
        """The planned call on these tensors: out, or (out, lse) with return_softmax_lse."""
        given = _layouts(q, k_cache, v_cache, q_descale, k_descale, v_descale)
        if given != self._layouts:
            names = ("q", "k_cache", "v_cache", "q_descale", "k_descale", "v_descale")
            diff = [f"{n} {_describe_layout(g)} (planned {_describe_layout(p)})"
                    for n, g, p in zip(names, given, self._layouts) if g != p]
            raise ValueError("KVCachePlan.run takes tensors laid out as planned: " + "; ".join(diff))
        out, lse = self._run(q, k_cache, v_cache, self._lens, self._table, q_descale=q_descale, k_descale=k_descale,
                             v_descale=v_descale, **self._kwargs)
        return (out, lse) if return_softmax_lse else out


def _layouts(*tensors) -> tuple:
    """Each tensor's (shape, strides, dtype, device, 16-byte aligned), None for None: what the
    checks and the backend's choice read of it."""
    return tuple(None if x is None else (x.shape, x.stride(), x.dtype, x.device, x.data_ptr() % 16 == 0)
                 if isinstance(x, torch.Tensor) else (type(x).__name__,) for x in tensors)


def _describe_layout(layout) -> str:
    if layout is None or len(layout) == 1:
        return "None" if layout is None else f"a {layout[0]}, not a tensor"
    shape, stride, dtype, device, aligned = layout
    return f"{tuple(shape)} strides {stride} {dtype} on {device}{'' if aligned else ', not 16-byte aligned'}"


def explain_kvcache(q, k_cache, v_cache, cache_seqlens=None, page_table=None, q_descale=None, k_descale=None,
                    v_descale=None, softmax_scale=None, causal=False, num_splits=0, sm_margin=0, *,
                    block_table=None, backend="auto", fp8_dots=None) -> str:
    """Which backend flash_attn_with_kvcache would use for these inputs and why each other would
    not; for the Gluon and Triton kernels also their key splits and tile."""
    table = one_table(page_table, block_table)
    _, table = check_call(q, k_cache, v_cache, cache_seqlens, table, q_descale, k_descale, v_descale,
                          softmax_scale, causal, num_splits, sm_margin)
    check_fp8_dots(fp8_dots, k_cache, k_descale, v_descale)
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

