"""Variable-length (packed) batches and a paged KV cache, FlashAttention's varlen layout.

A batch whose backend has a packed entry (zyfa.dispatch.Backend.run_packed) runs in one launch
over all sequences; a paged cache is read in place by a backend that reads its layout
(run_paged), else its pages (and 16-bit V's) are first gathered into a packed batch (one copy
of the used pages), while FP8 V stays the pool for the backend to write V^T from in place.
Backends without a packed entry run one ``zyfa.flash_attn_func`` call per sequence, the results
concatenated. Either way the sequence lengths are read on the host (they are validated there:
zyfa.batch_lengths). A mixed batch's decode sequences go to the decode kernel (zyfa.mixed).
"""
from __future__ import annotations

import torch

from . import api, dispatch
from .device import to_device
from .batch_lengths import PAGE_SIZES, check_max, check_tensor_dim, int32_list, key_lengths, lengths
from .mixed import MixedPlan, plan, run_decodes
from .spec.descales import check_descale
from .spec.shapes import out_dtype, starts_of
from .validation import (check_out, check_window, fp8_rules, keys_past_diagonal, refuse_unsupported,
                         softmax_scale_value, validate)

# backend="auto": a packed batch whose sequences average at most this many queries runs in one
# launch even where the chosen backend would take each sequence (dispatch.packed_backends): one
# Triton launch measured faster on the H200 than a generated kernel a sequence below this,
# slower above (docs/decisions.md).
SHORT_MEAN_QUERIES = 2048


def _descale_for(d, i):
    """Sequence i's descale: (batch, kv_heads) is per sequence, scalar and (kv_heads,) shared."""
    return d[i:i + 1] if d is not None and d.dim() == 2 else d


def _check_descales(descales, batch, hkv) -> None:
    for name, d in descales.items():
        if d is None:
            continue
        if isinstance(d, torch.Tensor) and d.dim() == 3:
            raise ValueError(f"{name} has shape {tuple(d.shape)}: flash_attn_varlen_func takes descales per "
                             f"(sequence, kv head), shape (), ({hkv},) or ({batch}, {hkv}), not per token/channel")
        check_descale(name, d, batch, hkv, ())


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
                           seqused_q=None, seqused_k=None, softmax_scale=None, causal=False, qv=None, q_descale=None,
                           k_descale=None, v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0,
                           num_splits=1, pack_gqa=None, deterministic=False, sm_margin=0, return_attn_probs=False, *,
                           block_table=None, dropout_p=0.0, alibi_slopes=None, return_softmax_lse=False, out=None,
                           return_lse=False, backend="auto", p_rule=None, ref_rule=None):
    """Attention over a packed batch of sequences of different lengths, FlashAttention-3's varlen
    signature (FlashAttention-2's keywords too; zyfa.flash_attn_func says which options run).

    q: (total_q, heads, head_dim) with cu_seqlens_q int32 (batch + 1,) prefix sums of the query
    lengths. Keys either packed -- k, v (total_k, kv_heads, head_dim[_v]) with cu_seqlens_k
    (optionally seqused_k (batch,) int32: sequence i uses only its first seqused_k[i] keys) --
    or a paged KV cache: k, v (num_pages, page_size, kv_heads, head_dim[_v]) (page_size a
    multiple of 16 in 16..256), block_table (batch, max_pages) int32 naming each sequence's
    pages in order, and the key counts either as seqused_k (batch,) int32 (FlashAttention-3,
    vLLM; cu_seqlens_k None) or as cu_seqlens_k's prefix sums (FlashAttention-2), the same result.
    max_seqlen_q/k: ints at least the longest sequence's query/key count (None: computed). The
    index tensors may live on the CPU or the GPU; their values are read on the host (validation,
    tables), so CPU tensors spare the device synchronization that reading GPU ones costs every call.

    causal (default False, as in FlashAttention) aligns the mask bottom-right per sequence (query
    i of a sequence sees keys j <= i + seqlen_k - seqlen_q), so a chunk of new queries over a
    longer cached prefix is one call; seqlen_q > seqlen_k is then an error. window_size=(left,
    right) adds a sliding window per sequence, as in flash_attn_func. Sequences with 0 queries
    are skipped.
    FP8 descales are per (sequence, kv head): (batch, kv_heads), or () / (kv_heads,) shared
    (zyfa.quantize_fp8_varlen makes them).
    V may be contiguous or in zyfa.quantize_fp8's transposed layout (seqlen contiguous).

    Returns out (total_q, heads, head_dim_v) and, with return_attn_probs / return_softmax_lse /
    return_lse, (out, lse) with the float32 natural-log LSE (heads, total_q), as FlashAttention's
    varlen function does; ``out=`` writes the output into a given tensor.

    The backend is chosen as for one sequence of the longest lengths; where it has a packed
    entry (the generated Hopper kernel, the Triton kernel; also, with "auto", a backend with
    one where the chosen backend has none but the sequences average at most
    SHORT_MEAN_QUERIES queries), one launch runs the whole packed batch, a paged cache read in
    place or gathered first (see the module's note). Otherwise one zyfa.flash_attn_func call a
    sequence on ``backend``, concatenated.
    """
    refuse_unsupported(dropout_p=dropout_p, softcap=softcap, alibi_slopes=alibi_slopes, qv=qv,
                       attention_chunk=attention_chunk, seqused_q=seqused_q)
    check_tensor_dim("q", q, 3, "(total_q, heads, head_dim)")
    if q.shape[0] == 0:
        raise ValueError(f"q is empty (total_q 0, shape {tuple(q.shape)}); at least one sequence needs queries")
    q_lens = lengths("cu_seqlens_q", cu_seqlens_q, q.shape[0], "total tokens of q (q.shape[0])")
    batch = len(q_lens)
    k_lens, where = key_lengths(k, cu_seqlens_k, block_table, seqused_k, batch)
    check_tensor_dim("v", v, k.dim(), "with the layout of k")
    if k.shape[:-1] != v.shape[:-1]:
        raise ValueError(f"k and v must agree in all but head_dim: k {tuple(k.shape)}, v {tuple(v.shape)}")
    check_max("max_seqlen_q", max_seqlen_q, q_lens, "queries")
    check_max("max_seqlen_k", max_seqlen_k, k_lens, "keys")
    descales = dict(q_descale=q_descale, k_descale=k_descale, v_descale=v_descale)
    _check_descales(descales, batch, k.shape[-2])
    # dtypes, devices, head dims, heads % kv_heads, strides, softmax_scale and the descales'
    # presence: flash_attn_func's checks on a batch-1 view of the whole input
    kv_view = (lambda x: x[:1]) if block_table is not None else (lambda x: x.unsqueeze(0))
    is_fp8 = validate(q.unsqueeze(0), kv_view(k), kv_view(v), False, softmax_scale,
                      *(_descale_for(d, 0) for d in descales.values()))
    given_causal = causal
    causal, window = check_window(window_size, causal)
    bound = keys_past_diagonal(causal, window)      # check_window raises where a row would see no key
    for i, (sq, sk) in enumerate(zip(q_lens, k_lens)):
        if sq and sk == 0:
            raise ValueError(f"sequence {i} has seqlen_q {sq} and seqlen_k 0: queries need at least one key")
        if 0 <= bound < sq - sk:
            try:
                check_window(window_size, given_causal, sq, sk)
            except ValueError as e:
                raise ValueError(f"sequence {i}: {e}") from None
    if out is not None:
        check_out(out, (q.shape[0], q.shape[1], v.shape[-1]), out_dtype(q.dtype), q.device)

    p_rule, ref_rule = fp8_rules(is_fp8, p_rule, ref_rule, q.dtype)
    scale = softmax_scale_value(softmax_scale)
    problem = dispatch.problem(q.device, (q.shape[-1], v.shape[-1]), max(q_lens), max(k_lens), causal=causal,
                               is_fp8=is_fp8, p_rule=p_rule, ref_rule=ref_rule, int8_qk=q.dtype == torch.int8,
                               window=window, packed=True)
    kw = dict(softmax_scale=scale, causal=causal, **descales, p_rule=p_rule, ref_rule=ref_rule, window_size=window)
    mixed = plan(q, v, q_lens, k_lens, window, backend, is_fp8, p_rule, ref_rule)      # decodes: zyfa.mixed
    args = (q, k, v, q_lens, k_lens, where, cu_seqlens_q, block_table, problem, backend, kw)
    result = _run_mixed(*args, mixed=mixed) if mixed.routed else _one_launch(*args)
    if result is None:
        result = _per_sequence(q, k, v, q_lens, k_lens, where, scale, causal, window, descales, backend,
                               p_rule, ref_rule, is_fp8, block_table)
    if out is not None:
        result = (out.copy_(result[0]), result[1])
    return result if (return_lse or return_softmax_lse or return_attn_probs) else result[0]


def _run_mixed(q, k, v, q_lens, k_lens, where, cu_seqlens_q, block_table, problem, backend, kw, *,
               mixed: MixedPlan):
    """(out, lse) of a routed mixed batch: the prefill launch over every sequence (a decode
    sequence's tiles left out where the kernel lists its tiles, else seeing its first q_len
    keys there; with no prefill sequence, no launch), then the decode kernel over the decode
    sequences' rows (mixed.run_decodes). The arguments are _one_launch's."""
    dev = q.device
    scale, causal, p_rule, ref_rule = kw["softmax_scale"], kw["causal"], kw["p_rule"], kw["ref_rule"]
    descales = {n: kw[n] for n in ("q_descale", "k_descale", "v_descale") if n in kw}
    is_fp8 = problem.is_fp8
    if mixed.prefill:
        pre_k = list(k_lens)
        for i in mixed.decode:
            pre_k[i] = min(k_lens[i], q_lens[i])
        result = _one_launch(q, k, v, q_lens, pre_k, where, cu_seqlens_q, block_table, problem, backend, kw,
                             mean_of=[q_lens[i] for i in mixed.prefill], written_elsewhere=mixed.decode)
        if result is None:
            result = _per_sequence(q, k, v, q_lens, pre_k, where, scale, causal, (-1, -1), descales, backend, p_rule,
                                   ref_rule, is_fp8, block_table)
        out, lse = result
    else:
        out = torch.empty(q.shape[0], q.shape[1], v.shape[-1], dtype=out_dtype(q.dtype), device=dev)
        lse = torch.empty(q.shape[1], q.shape[0], dtype=torch.float32, device=dev)
    run_decodes(mixed, out, lse, q, k, v, q_lens, k_lens, where, scale, causal, descales, block_table)
    return out, lse


def _per_sequence(q, k, v, q_lens, k_lens, where, scale, causal, window, descales, backend, p_rule, ref_rule,
                  is_fp8, block_table):
    """(out, lse) from one zyfa.flash_attn_func call a sequence, concatenated."""
    rules = {"p_rule": p_rule, "ref_rule": ref_rule} if is_fp8 else {}
    outs, lses, q_start = [], [], 0
    for i, (sq, sk) in enumerate(zip(q_lens, k_lens)):
        q_start += sq
        if sq == 0:
            continue
        if block_table is None:
            ks, vs = (x[where[i]:where[i] + sk].unsqueeze(0) for x in (k, v))
        else:
            pages = to_device(where[i], k.device, torch.long)       # one copy of the page list for k and v
            ks, vs = (x.index_select(0, pages).flatten(0, 1)[:sk].unsqueeze(0) for x in (k, v))
        out, lse = api.flash_attn_func(q[q_start - sq:q_start].unsqueeze(0), ks, vs, softmax_scale=scale,
                                       causal=causal, window_size=window, return_lse=True, backend=backend,
                                       **rules, **{n: _descale_for(d, i) for n, d in descales.items()})
        outs.append(out[0])
        lses.append(lse[0])
    return torch.cat(outs, 0), torch.cat(lses, 1)


def _one_launch(q, k, v, q_lens, k_lens, where, cu_seqlens_q, block_table, problem, backend, kw, mean_of=None,
                written_elsewhere=()):
    """(out, lse) from one launch over the packed batch on the backend dispatch.packed_backends
    names, or None where there is none (a call a sequence then). A paged cache (``where``: each
    sequence's pages) goes to the backend that reads it in place where that one takes its layout,
    else its pages are gathered into a packed batch first (_gathered_pages); contiguous keys
    (``where``: each sequence's first key) go as they are. Backends read the caller's
    (validated) index tensors, or kept copies of the same values (device.host_table). ``mean_of``: the query counts that say whether the batch is short
    (a mixed batch: its prefill sequences'); ``written_elsewhere``: sequences whose rows a later
    launch writes (PackedBatch's)."""
    mean_of = mean_of or q_lens
    short = sum(mean_of) <= SHORT_MEAN_QUERIES * len(mean_of)
    one, reader = dispatch.packed_backends(problem, backend, short)
    q_lens, k_lens = tuple(q_lens), tuple(k_lens)
    if block_table is not None:
        if reader is not None:
            batch = dispatch.PackedBatch(cu_seqlens_q, q_lens, k_lens, block_table=block_table,
                                         written_elsewhere=written_elsewhere)
            result = reader.run_paged(q, k, v, batch, **kw)
            if result is not None:
                return result
        if one is None:
            return None
        k, v, starts, v_pages = _gathered_pages(k, v, where, problem.is_fp8)
        batch = dispatch.PackedBatch(cu_seqlens_q, q_lens, k_lens, k_starts=starts, v_pages=v_pages,
                                      written_elsewhere=written_elsewhere)
    elif one is None:
        return None
    else:
        batch = dispatch.PackedBatch(cu_seqlens_q, q_lens, k_lens, k_starts=where, written_elsewhere=written_elsewhere)
    return one.run_packed(q, k, v, batch, **kw)


def _gathered_pages(k, v, pages, is_fp8: bool):
    """A paged cache the kernel cannot read in place, copied into a packed layout: each
    sequence's pages in order, one gather a pool: (k, v (total, kv_heads, d), each sequence's
    first key, None); the sequence's key count says how many of its pages' keys it uses. FP8
    v stays the pool (returned with ``pages`` in place of None): packed_vt writes V^T from it
    in place, where a gather would turn each page's V^T into rows only for packed_vt to turn
    them back."""
    page = k.shape[1]
    order = to_device(torch.cat(pages) if pages else torch.zeros(0, dtype=torch.int32), k.device, torch.long)
    k = k.index_select(0, order).flatten(0, 1)
    starts = starts_of([len(p) * page for p in pages])
    if is_fp8:
        return k, v, starts, pages
    return k, v.index_select(0, order).flatten(0, 1), starts, None


def paged_kv_cache(k, v, cu_seqlens_k, page_size: int, seed: int | None = 0, spare_pages: int = 0):
    """A packed batch's keys and values (total_k, kv_heads, head_dim) as the paged KV cache
    flash_attn_varlen_func reads: (k_pages, v_pages, block_table, seqused_k). Each sequence
    takes ceil(len / page_size) pages of a pool with ``spare_pages`` more; ``seed`` shuffles
    which pool page each takes (None: in order), as a serving engine's allocator leaves them.
    Rows past a sequence's end are zero. E4M3 V keeps quantize_fp8's layout: each page's V
    transposed (its rows contiguous), which the kernels read."""
    starts = int32_list("cu_seqlens_k", cu_seqlens_k, 1)
    if page_size not in PAGE_SIZES:
        raise ValueError(f"page_size must be a multiple of 16 in 16..256, got {page_size}")
    lens = [b - a for a, b in zip(starts, starts[1:])]
    pages = [-(-n // page_size) for n in lens]
    pool = sum(pages) + spare_pages
    order = (torch.randperm(pool, generator=torch.Generator().manual_seed(seed)) if seed is not None
             else torch.arange(pool))
    k_pages = k.new_zeros(pool, page_size, *k.shape[1:])
    v_pages = v.new_zeros(pool, page_size, *v.shape[1:])
    table = torch.zeros(len(lens), max(pages, default=0), dtype=torch.int32)
    used = 0
    for i, (a, n, p) in enumerate(zip(starts, lens, pages)):
        ids = order[used:used + p]
        table[i, :p], used = ids.to(torch.int32), used + p
        ids = ids.to(k.device)
        for src, dst in ((k, k_pages), (v, v_pages)):
            rows = torch.nn.functional.pad(src[a:a + n].unsqueeze(0), (0, 0, 0, 0, 0, p * page_size - n))
            dst[ids] = rows.reshape(p, page_size, *src.shape[1:])
    if v_pages.dtype == torch.float8_e4m3fn:
        v_pages = v_pages.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    seqused_k = torch.tensor(lens, dtype=torch.int32, device=k.device)
    return k_pages, v_pages, table.to(k.device), seqused_k
