"""The backends' packed entries (zyfa.dispatch.Backend's run_packed and run_paged): a validated
packed batch (zyfa.dispatch.PackedBatch) turned into the tables and V layout each kernel takes,
then one launch. The generated Hopper kernel reads contiguous keys only; the Triton kernel also
reads a paged cache in place where the pages are a multiple of its key tile. The kernels are
imported on first use, as the backends' run functions import them (loading a generator or the
driver bindings is not the cost of importing zyfa)."""
from __future__ import annotations

import torch

from .device import host_table, to_device
from .spec.shapes import Packed, cu_seqlens


def _is_fp8(v) -> bool:
    """E4M3 v: an FP8 call (q and k E4M3 or int8), as the kernels themselves tell."""
    return v.dtype == torch.float8_e4m3fn


def contiguous_tables(q, v, batch, key_order: bool = False):
    """A contiguous packed batch as both kernels take it: v (FP8: V^T re-packed to 16-key
    starts, packed_vt, in the Hopper key order for the generated kernel: ``key_order``; FP8 v
    still a pool, batch.v_pages: V^T written from it in place; 16-bit: (1, total_k, Hkv, Dv))
    and its tables (Packed)."""
    from .hopper_vt import packed_vt
    dev = q.device
    cu_q = cu_seqlens(batch.q_lens)              # from the lengths read from the caller's
    if _is_fp8(v):
        v, _, (v_start, k_start, k_len) = packed_vt(v, batch.k_starts, batch.k_lens, key_order,
                                                   pages=batch.v_pages)   # its rows
        cu_q = host_table(cu_q, dev)
    else:
        v = v.unsqueeze(0)
        n = len(batch.q_lens)                                     # one table, kept
        table = host_table([*cu_q, *batch.k_starts, *batch.k_lens], dev)
        cu_q, k_start, k_len = table[:n + 1], table[n + 1:2 * n + 1], table[2 * n + 1:]
        v_start = k_start
    return v, Packed(cu_q, k_start, v_start, k_len, max(batch.q_lens), max(batch.k_lens),
                     lengths=(tuple(batch.q_lens), tuple(batch.k_lens)), written_elsewhere=batch.written_elsewhere)


def ptx_packed(q, k, v, batch, *, softmax_scale, causal, q_descale, k_descale, v_descale, p_rule, ref_rule,
               window_size):
    """(out, lse) of a contiguous packed batch from one launch of the generated Hopper kernel."""
    from .asm.ptx.kernels import attention_16, attention_fp8
    is_fp8 = _is_fp8(v)
    v, packed = contiguous_tables(q, v, batch, key_order=True)
    scale = None if softmax_scale is None else float(softmax_scale)
    if is_fp8:
        out, lse = attention_fp8(q.unsqueeze(0), k.unsqueeze(0), v, scale, causal, q_descale=q_descale,
                                 k_descale=k_descale, v_descale=v_descale, p_rule=p_rule, ref_rule=ref_rule,
                                 packed=packed, window_size=window_size)
    else:
        out, lse = attention_16(q.unsqueeze(0), k.unsqueeze(0), v, scale, causal, packed=packed,
                                window_size=window_size)
    return out[0], lse[0]


def triton_packed(q, k, v, batch, *, softmax_scale, causal, q_descale, k_descale, v_descale, p_rule, ref_rule,
                  window_size):
    """(out, lse) of a contiguous packed batch from one launch of the Triton kernel (its tile as
    for a dense call: tuned table, autotuning or ZYFA_TRITON_CONFIG)."""
    from .triton_kernels.launch import triton_attention
    v, packed = contiguous_tables(q, v, batch)
    out, lse = triton_attention(q.unsqueeze(0), k.unsqueeze(0), v, softmax_scale, causal, q_descale=q_descale,
                                k_descale=k_descale, v_descale=v_descale, p_rule=p_rule, ref_rule=ref_rule,
                                config=None, packed=packed, window_size=window_size)
    return out[0], lse[0]


def triton_paged(q, k, v, batch, *, softmax_scale, causal, q_descale, k_descale, v_descale, p_rule, ref_rule,
                 window_size):
    """(out, lse) of a packed batch over a paged cache read in place by the Triton kernel, in one
    launch; None where the pools' layout is not one it reads (_pages_fit). Its tile is the
    default one (no autotuning: the page size was checked against that tile's key width)."""
    from .triton_kernels.launch import default_tile, triton_attention
    is_fp8 = _is_fp8(v)
    tile = default_tile(q.device, is_fp8, q.shape[-1], v.shape[-1], causal, max(batch.k_lens))
    if not _pages_fit(k, v, is_fp8, tile.block_n):
        return None
    dev = q.device
    zeros = torch.zeros(len(batch.q_lens), dtype=torch.int32, device=dev)
    packed = Packed(to_device(batch.cu_seqlens_q, dev), zeros, zeros, to_device(batch.k_lens, dev),
                    max(batch.q_lens), max(batch.k_lens), to_device(batch.block_table, dev), k.shape[1])
    k = k.reshape(1, -1, *k.shape[2:])                  # the pools; each sequence's keys from its pages
    v = v if is_fp8 else v.reshape(1, -1, *v.shape[2:])
    out, lse = triton_attention(q.unsqueeze(0), k, v, softmax_scale, causal, q_descale=q_descale,
                                k_descale=k_descale, v_descale=v_descale, p_rule=p_rule, ref_rule=ref_rule,
                                config=tile, packed=packed, window_size=window_size)
    return out[0], lse[0]


def _pages_fit(k, v, is_fp8: bool, block_n: int) -> bool:
    """Whether the kernel reads the paged pools in place: pages of a multiple of its key tile,
    k (and BF16 v) contiguous, FP8 v with each page's V^T contiguous (quantize_fp8's layout
    page by page)."""
    page = k.shape[1]
    v_ok = v.permute(0, 2, 3, 1).is_contiguous() if is_fp8 else v.is_contiguous()
    return page % block_n == 0 and k.is_contiguous() and v_ok
