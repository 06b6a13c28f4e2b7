"""FP8 V^T as the kernels read it, in one Triton launch: a dense batch's in the Hopper key
order (zyfa.spec.key_order.hopper_vt's bytes), a packed batch's with each sequence at a
16-key start, in that order or the natural one.

The FP8 kernels on Hopper read V^T with the keys of each 16-key group permuted, which no
strides can express, so V is rewritten on every call. In PyTorch that is a seven-dimensional
permuted copy of bytes (plus a concatenation when the key count is not a multiple of 16);
here each program reads a (64 columns x 256 keys) tile in key order, permutes its keys in
registers and writes it contiguous, zeros past the last key. A packed batch went through a
copy, a gather and that rewrite (573 us at zyfa bench's 64K-key varlen case on the H200);
here each slot finds its sequence and key in the same launch (64 us, its loads told to run
along keys). The spec's function stays the contract. Both Hopper paths call
it (the generated kernel's host code and the Triton kernel's), so it lives outside either
kernel package, as zyfa.tma does.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .device import to_device
from .launch_sizes import cdiv, next_power_of_2
from .spec.constants import LOG2E
from .spec.descales import coarse_view, head_factor, per_channel_v_descale
from .spec.key_order import HOPPER_GROUP
from .spec.shapes import page_rows, starts_of

BLOCK_D, BLOCK_K = 64, 256


@triton.jit
def _vt_kernel(src, dst, seqlen_k, padded_k, kv_heads, dv, stride_b, stride_k, stride_h, stride_d,
               slot_start, key_start, key_count, sequences, page_table, table_stride,
               qd, kd, vd, fac, vd_out, qd_b, qd_h, kd_b, kd_h, vd_b, vd_h, vd_d, score_scale,
               PACKED: tl.constexpr, KEY_ORDER: tl.constexpr, PAGE: tl.constexpr, BLOCK_D: tl.constexpr,
               BLOCK_K: tl.constexpr, FACTORS: tl.constexpr, BLOCK_V: tl.constexpr, COPY: tl.constexpr):
    bh = tl.program_id(0)
    b, h = bh // kv_heads, bh % kv_heads
    if FACTORS:
        if (tl.program_id(1) == 0) & (tl.program_id(2) == 0):
            _factors(qd, kd, vd, fac, vd_out, b, h, bh, qd_b, qd_h, kd_b, kd_h, vd_b, vd_h, vd_d, dv, score_scale,
                     BLOCK_V)
    if not COPY:                # V^T read where it lies (natural_vt): the factors only
        return
    slot = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    d = tl.program_id(2) * BLOCK_D + tl.arange(0, BLOCK_D)
    if PACKED:
        # batch 1; a slot's sequence is the last one starting at or before it (an empty
        # sequence starts where the next does, so none lands on it)
        seq = tl.zeros([BLOCK_K], dtype=tl.int32)
        for i in range(1, sequences):
            seq += (slot >= tl.load(slot_start + i)).to(tl.int32)
        pos = slot - tl.load(slot_start + seq)
        # runs of 16 contiguous keys (a 16-slot group lies in one sequence): said to the
        # compiler, a warp's loads run along keys where V's keys are contiguous, as in the
        # dense case (unsaid, along columns: 32 rows a load, 0.2-0.45 TB/s)
        valid = pos < tl.load(key_count + seq)
        if PAGE:
            # a paged pool: the key's page from the sequence's row of the table, the same for
            # a 16-slot group (PAGE a multiple of 16), masked keys included; a group past the
            # sequence's pages reads the row's last entry (its loads are masked)
            entry = tl.minimum(pos // PAGE, table_stride - 1)
            page = tl.max_constancy(tl.load(page_table + seq * table_stride + entry), 16)
            key_at = page.to(tl.int64) * stride_b + tl.max_contiguous(pos % PAGE, 16).to(tl.int64) * stride_k
        else:
            key_at = tl.max_contiguous(tl.load(key_start + seq) + pos, 16).to(tl.int64) * stride_k
    else:
        valid = slot < seqlen_k
        key_at = b.to(tl.int64) * stride_b + slot.to(tl.int64) * stride_k
    # keys in their own order, so a load runs along whichever of keys and columns is contiguous
    # (bytes singly through the permutation ran at 480 GB/s)
    x = tl.load(src + h.to(tl.int64) * stride_h + d[:, None].to(tl.int64) * stride_d + key_at[None, :],
                mask=(d[:, None] < dv) & valid[None, :], other=0)
    if KEY_ORDER:
        # key 16 g + 8 h + 2 q + e to slot 16 g + 4 q + 2 h + e: swap the (h, q) axes in registers
        # (a packed batch's sequences start at multiples of 16, so no group spans two)
        x = tl.reshape(x, (BLOCK_D, BLOCK_K // 16, 2, 4, 2))
        x = tl.reshape(tl.permute(x, (0, 1, 3, 2, 4)), (BLOCK_D, BLOCK_K))
    out = dst + (bh.to(tl.int64) * dv + d[:, None]) * padded_k + slot[None, :]
    tl.store(out, x, mask=(d[:, None] < dv) & (slot[None, :] < padded_k))


@triton.jit
def _factors(qd, kd, vd, fac, vd_out, b, h, bh, qd_b, qd_h, kd_b, kd_h, vd_b, vd_h, vd_d, dv, score_scale,
             BLOCK_V: tl.constexpr):
    """(b, h)'s score factor, (q descale * k descale) * score_scale in float32 as
    zyfa.spec.descales.head_factor forms it, and its V descales a channel (a coarse one
    broadcast: stride 0), as per_channel_v_descale writes them."""
    q_d = tl.load(qd + b * qd_b + h * qd_h).to(tl.float32)
    k_d = tl.load(kd + b * kd_b + h * kd_h).to(tl.float32)
    tl.store(fac + bh, (q_d * k_d) * score_scale)
    ch = tl.arange(0, BLOCK_V)
    v_d = tl.load(vd + b * vd_b + h * vd_h + ch * vd_d, mask=ch < dv)
    tl.store(vd_out + bh * dv + ch, v_d.to(tl.float32), mask=ch < dv)


_NO_FACTOR_SIZES = (0,) * 7 + (1.0,)     # the strides and scale of a launch that writes no factors


def _launch(u, out, seqlen_k, padded, Hkv, Dv, batch_heads, tables, packed, key_order, page=0, factors=None,
            copy=True):
    grid = (batch_heads, cdiv(padded, BLOCK_K), cdiv(Dv, BLOCK_D)) if copy else (batch_heads, 1, 1)
    if grid[1] and (copy or factors):
        _vt_kernel[grid](u, out, seqlen_k, padded, Hkv, Dv, *u.stride(), *tables,
                         *(factors or (u,) * 5 + _NO_FACTOR_SIZES), PACKED=packed, KEY_ORDER=key_order,
                         PAGE=page, BLOCK_D=BLOCK_D, BLOCK_K=BLOCK_K, FACTORS=factors is not None,
                         BLOCK_V=next_power_of_2(Dv), COPY=copy)


def hopper_vt(v: torch.Tensor, factors: tuple | None = None, key_order: bool = True) -> torch.Tensor:
    """(B, Hkv, Dv, Sk rounded up to 16) uint8 from v (B, Sk, Hkv, Dv) of one-byte elements,
    any strides: the bytes of zyfa.spec.key_order.hopper_vt(v) (``key_order`` False: V^T in
    the keys' own order, a view where natural_vt finds one); ``factors``: _factors' arguments,
    written in the same launch (hopper_inputs)."""
    B, Sk, Hkv, Dv = v.shape
    u = v.view(torch.uint8)
    out = None if key_order else natural_vt(v)
    padded = Sk + (-Sk) % HOPPER_GROUP
    copy = out is None
    if copy:
        out = torch.empty(B, Hkv, Dv, padded, dtype=torch.uint8, device=v.device)
    _launch(u, out, Sk, padded, Hkv, Dv, B * Hkv, (u, u, u, 0, u, 0), packed=False, key_order=key_order,
            factors=factors, copy=copy)                                                   # no tables
    return out


def natural_vt(v: torch.Tensor) -> torch.Tensor | None:
    """V^T (B, Hkv, Dv, Sk) uint8 as a view of v (B, Sk, Hkv, Dv) stored transposed (quantize_fp8's
    layout), (B, Hkv) one run of rows and its strides as TMA takes them; else None."""
    u = v.view(torch.uint8).permute(0, 2, 3, 1)
    fits = (u.stride(3) == 1 and u.stride(0) == u.shape[1] * u.stride(1) and u.stride(1) % 16 == 0
            and u.stride(2) % 16 == 0 and u.data_ptr() % 16 == 0)
    return u if fits else None


def hopper_inputs(v: torch.Tensor, q_descale: torch.Tensor, k_descale: torch.Tensor, v_descale: torch.Tensor,
                  softmax_scale: float, key_order: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What a dense FP8 call of the generated kernel prepares, in hopper_vt's one launch: V^T,
    the score factors (B, Hkv) float32 of zyfa.spec.descales.head_factor and the V descales
    (B, Hkv, Dv) float32 of per_channel_v_descale. Descales as validated (coarse q and k: (),
    (Hkv,) or (B, Hkv); v also (B, Hkv, Dv)); q and k ones other than float32 take
    head_factor's own launches (its product is in their type)."""
    B, _, Hkv, Dv = v.shape
    dev = v.device
    if q_descale.dtype != torch.float32 or k_descale.dtype != torch.float32:
        return hopper_vt(v, key_order=key_order), head_factor(q_descale, k_descale, B, Hkv, softmax_scale, dev), \
            per_channel_v_descale(v_descale.to(dev), B, Hkv, Dv)
    qd, kd = (coarse_view(d.to(dev), B, Hkv, n) for d, n in ((q_descale, "q_descale"), (k_descale, "k_descale")))
    vd = v_descale.to(dev)
    vd = vd if vd.dim() == 3 else coarse_view(vd, B, Hkv, "v_descale")[..., None].expand(B, Hkv, Dv)
    fac = torch.empty(B, Hkv, dtype=torch.float32, device=dev)
    vd_out = torch.empty(B, Hkv, Dv, dtype=torch.float32, device=dev)
    vt = hopper_vt(v, (qd, kd, vd, fac, vd_out, *qd.stride(), *kd.stride(), *vd.stride(), softmax_scale * LOG2E),
                   key_order)
    return vt, fac, vd_out


def packed_vt(v: torch.Tensor, starts: list[int], lens: list[int], key_order: bool = False,
              pages: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, list[int], torch.Tensor]:
    """A packed batch's FP8 V (total_k, Hkv, Dv), any strides, as V^T (1, Hkv, Dv, P) whose
    sequences start at multiples of 16 keys (zeros between them), returned as the (1, P, Hkv,
    Dv) view the kernels' host code takes, each sequence's start in it, and the int32 table
    on v's device whose rows are those starts, ``starts`` and ``lens`` (the attention kernels
    read the same rows: one host-to-device copy for all). ``key_order``: each 16-key group in
    the Hopper key order (zyfa.spec.key_order.hopper_vt's bytes, sequence by sequence), which
    the generated kernel reads. ``starts``, ``lens``: each sequence's first key and key count,
    host lists, so nothing waits for the GPU. ``pages``: v is instead a paged pool
    (num_pages, page_size, Hkv, Dv), read in place, and sequence i's keys lie in its pages
    ``pages[i]`` (an int32 host tensor) in order (``starts`` then only fills the table's row)."""
    padded = [n + (-n) % HOPPER_GROUP for n in lens]
    v_starts = starts_of(padded)
    Hkv, Dv = v.shape[-2:]
    u = v.view(torch.uint8) if pages is not None else v.view(torch.uint8)[None]
    out = torch.empty(1, Hkv, Dv, sum(padded), dtype=torch.uint8, device=v.device)
    n = len(lens)
    pt = page_rows(pages) if pages is not None else torch.zeros(0, 0, dtype=torch.int32)
    width = pt.shape[1]
    flat = to_device(torch.cat([torch.tensor([v_starts, starts, lens], dtype=torch.int32).flatten(), pt.flatten()]),
                     v.device)                                            # one copy
    table = flat[:3 * n].view(3, n)
    page_table = flat[3 * n:] if pages is not None else flat
    _launch(u, out, 0, out.shape[-1], Hkv, Dv, Hkv, (*table, n, page_table, width), packed=True,
            key_order=key_order, page=v.shape[1] if pages is not None else 0)
    return out.view(v.dtype).permute(0, 3, 1, 2), v_starts, table
