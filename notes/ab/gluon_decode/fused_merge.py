"""Lab (session s, CPU-compiled only): the Gluon E4M3 decode kernel with the split merge done by
the last split of each (sequence, kv head), instead of merge_kernel's launch.

Question for the GPU (run 68 or later): run 66 found a zyfa E4M3 decode call host-paced (235 us
of host a call at 8 x 32K against FA3's 146, for ~0.2 ms of GPU time). A split call launches
the decode kernel, then merge_kernel: two Triton launches, each its binder, cache key and
launcher (cuLaunchKernelEx alone took 13.5 us on that host). Here the decode kernel's programs
each write their partial as before, then count themselves done on a per-(sequence, kv head)
counter (atom.acq_rel.gpu after a CTA barrier); the program that counts last reads every
partial (split order, as merge_kernel weighs them: the max LSE first, then exp(lse_s - max))
and writes the row. The counters come zeroed from torch.zeros a call (a memset node, not a
Triton launch), so calls on several streams and CUDA graphs need nothing more. Prediction: the
host time a split call falls by one Triton launch (~40-50 us on the H100's host); the GPU time
moves by under 1% (the merge's ~2 us of reads run on the last program's SM instead of a launch
of their own). The merge sums in a loop, not merge_kernel's tree, so its bits differ from the
package's in the last place: both held to float64 by the A/B.

The package kernel runs unchanged as a device function (SPLIT=True), so this file holds only
the counter and the merge.
"""
import math

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from zyfa.decode_splits import split_parts
from zyfa.gluon_kernels.backend import splits
from zyfa.gluon_kernels.decode_fp8 import BLOCK_N, NUM_WARPS, ROWS, STAGES, decode_fp8_kernel
from zyfa.spec.constants import LOG2E
from zyfa.spec.descales import coarse_descale
from zyfa.spec.shapes import out_dtype


@gluon.jit
def _merge(O, LSE, O_PART, LSE_PART, b, kvh, bk, n_splits, Hq, stride_ob, stride_os, stride_oh,
           SQ: gl.constexpr, GROUP: gl.constexpr, DV: gl.constexpr, NQ: gl.constexpr):
    """merge_kernel's arithmetic for the GROUP * SQ rows of (b, kvh), splits in order."""
    out_l: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [NUM_WARPS, 1], [1, 0])   # a thread a column of O^T
    r = gl.arange(0, NQ, layout=gl.SliceLayout(0, out_l))
    dv = gl.arange(0, DV, layout=gl.SliceLayout(1, out_l))
    rows: gl.constexpr = GROUP * SQ
    ok = r < rows
    first = bk * n_splits
    top = gl.full([NQ], float("-inf"), gl.float32, gl.SliceLayout(0, out_l))
    for s in range(n_splits):
        lse_s = gl.load(LSE_PART + (first + s) * rows + r, mask=ok, other=float("-inf"), cache_modifier=".cg")
        top = gl.maximum(top, lse_s)
    top = gl.where(top == float("-inf"), 0.0, top)
    total = gl.zeros([NQ], gl.float32, gl.SliceLayout(0, out_l))
    acc = gl.zeros([DV, NQ], gl.float32, out_l)
    for s in range(n_splits):
        w = gl.exp(gl.load(LSE_PART + (first + s) * rows + r, mask=ok, other=float("-inf"), cache_modifier=".cg")
                   - top)
        o_s = gl.load(O_PART + ((first + s) * rows + r)[None, :] * DV + dv[:, None], mask=ok[None, :], other=0.0,
                      cache_modifier=".cg")
        total = total + w
        acc = acc + o_s * w[None, :]
    out = acc / total[None, :]
    o_ptrs = O + b * stride_ob + ((r % SQ) * stride_os + (kvh * GROUP + r // SQ) * stride_oh)[None, :] + dv[:, None]
    gl.store(o_ptrs, out.to(O.dtype.element_ty), mask=ok[None, :])
    gl.store(LSE + (b * Hq + kvh * GROUP) * SQ + r, top + gl.log(total), mask=ok)


@gluon.jit
def decode_fused_kernel(Q, K, V, QD, KD, VD, O, LSE, O_PART, LSE_PART, SEQLENS, TABLE, LEFTPAD, COUNT,
                        stride_qb, stride_qs, stride_qh, stride_kr, stride_kt, stride_kh,
                        stride_vr, stride_vt, stride_vh, stride_ob, stride_os, stride_oh,
                        table_stride, n_splits, Hq, Hkv, qk_scale_log2,
                        SQ: gl.constexpr, GROUP: gl.constexpr, D: gl.constexpr, DV: gl.constexpr,
                        NQ: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr, PAGE: gl.constexpr,
                        Q_FP8: gl.constexpr, CAUSAL: gl.constexpr, HAS_LEFTPAD: gl.constexpr):
    """decode_fp8_kernel with SPLIT, then the last split of each (sequence, kv head) merges."""
    decode_fp8_kernel(Q, K, V, QD, KD, VD, O, LSE, O_PART, LSE_PART, SEQLENS, TABLE, LEFTPAD,
                      stride_qb, stride_qs, stride_qh, stride_kr, stride_kt, stride_kh,
                      stride_vr, stride_vt, stride_vh, stride_ob, stride_os, stride_oh,
                      table_stride, n_splits, Hq, Hkv, qk_scale_log2,
                      SQ, GROUP, D, DV, NQ, BN, STAGES, PAGE, Q_FP8, CAUSAL, True, HAS_LEFTPAD)
    gl.thread_barrier()                   # every thread's partial stores before the count
    bk = gl.program_id(1)
    done = gl.atomic_add(COUNT + bk, 1, sem="acq_rel", scope="gpu")
    if done == n_splits - 1:
        _merge(O, LSE, O_PART, LSE_PART, bk // Hkv, bk % Hkv, bk, n_splits, Hq, stride_ob, stride_os, stride_oh,
               SQ, GROUP, DV, NQ)


def run_fused(q, k_cache, v_cache, cache_seqlens, block_table=None, softmax_scale=None, causal=False,
              q_descale=None, k_descale=None, v_descale=None, num_splits=0, sm_margin=0, cache_leftpad=None):
    """gluon_kernels.backend.run_decode's contract, its split calls merged in the kernel (the
    unsplit ones as the package launches them are not this file's question: num_splits >= 2)."""
    B, Sq, Hq, D = q.shape
    Hkv, Dv = k_cache.shape[2], v_cache.shape[-1]
    group = Hq // Hkv
    dev = q.device
    page = k_cache.shape[1] if block_table is not None else 0
    max_keys = block_table.shape[1] * page if page else k_cache.shape[1]
    n = splits(B, Hkv, max_keys, dev, sm_margin, num_splits)
    assert n >= 2, "the fused merge is for split calls"
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    out = torch.empty(B, Sq, Hq, Dv, dtype=out_dtype(q.dtype), device=dev)
    lse = torch.empty(B, Hq, Sq, dtype=torch.float32, device=dev)
    kd, vd = coarse_descale(k_descale, B, Hkv, "k_descale"), coarse_descale(v_descale, B, Hkv, "v_descale")
    qd = coarse_descale(q_descale, B, Hkv, "q_descale") if q_descale is not None else kd
    o_part, lse_part = split_parts(B, Hkv, n, group * Sq, Dv, lse)
    count = torch.zeros(B * Hkv, dtype=torch.int32, device=dev)
    table = block_table if block_table is not None else cache_seqlens
    decode_fused_kernel[(n, B * Hkv)](
        q, k_cache, v_cache, qd, kd, vd, out, lse, o_part, lse_part, cache_seqlens, table,
        cache_seqlens if cache_leftpad is None else cache_leftpad, count,
        q.stride(0), q.stride(1), q.stride(2), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), out.stride(0), out.stride(1), out.stride(2),
        table.stride(0) if block_table is not None else 0, n, Hq, Hkv, scale * LOG2E,
        SQ=Sq, GROUP=group, D=D, DV=Dv, NQ=ROWS, BN=BLOCK_N, STAGES=STAGES, PAGE=page,
        Q_FP8=q_descale is not None, CAUSAL=causal, HAS_LEFTPAD=cache_leftpad is not None,
        num_warps=NUM_WARPS.value)
    return out, lse
