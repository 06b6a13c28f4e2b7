"""Lab (session p, CPU-compiled only): the Gluon E4M3 decode kernel with two kv heads a program.

Question for the H100 (run 59): every E4M3 decode kernel tried there reads at ~2.55-2.6 TB/s, 86-88%
of the copy, where BF16 decode reads at ~2.85-3.0. An E4M3 (batch, tokens, kv heads, 128) cache
gives one head's key 128 contiguous bytes; a program per kv head asks DRAM for 128-byte pieces
whose neighbours other programs read at other times. Here a program takes two adjacent kv heads
and copies their keys' 256 bytes back to back (one head's buffer, then the other's), then runs
the package kernel's step for each head in turn. Needs zyfa.gluon_kernels (notes/ab/gluon_decode's
diff applied). Dense or paged, any query count and q form, as the package kernel.

Shared memory at 64-key tiles in three stages: 4 x 8 KB a stage (K and V of two heads), 96 KB,
plus the widened V and P^T: two programs an SM.
"""
import math

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia import hopper
from triton.experimental.gluon.language.nvidia.ampere import async_copy

from zyfa.gluon_kernels.decode_fp8 import NUM_WARPS, ROWS, _NEG_FLOOR, _cache_rows, _copy_tile, _queries, _step, _write
from zyfa.spec.constants import LOG2E


@gluon.jit
def _copy_two(k_s, v_s, k_base, v_base, stride_kh, stride_vh, rows, toks, keys, hi, stride_kr, stride_kt, stride_vr,
              stride_vt, offs_d, offs_dv, stage):
    """Both heads' K and V tiles of one stage, head 0's then head 1's (adjacent bytes)."""
    _copy_tile(k_s.index(2 * stage), k_base, rows, toks, keys, hi, stride_kr, stride_kt, offs_d)
    _copy_tile(k_s.index(2 * stage + 1), k_base + stride_kh, rows, toks, keys, hi, stride_kr, stride_kt, offs_d)
    _copy_tile(v_s.index(2 * stage), v_base, rows, toks, keys, hi, stride_vr, stride_vt, offs_dv)
    _copy_tile(v_s.index(2 * stage + 1), v_base + stride_vh, rows, toks, keys, hi, stride_vr, stride_vt, offs_dv)
    async_copy.commit_group()


@gluon.jit
def two_heads_kernel(Q, K, V, QD, KD, VD, O, LSE, O_PART, LSE_PART, SEQLENS, TABLE,
                     stride_qb, stride_qs, stride_qh, stride_kr, stride_kt, stride_kh,
                     stride_vr, stride_vt, stride_vh, stride_ob, stride_os, stride_oh,
                     table_stride, n_splits, Hq, Hkv, qk_scale_log2,
                     SQ: gl.constexpr, GROUP: gl.constexpr, D: gl.constexpr, DV: gl.constexpr,
                     NQ: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr, PAGE: gl.constexpr,
                     Q_FP8: gl.constexpr, CAUSAL: gl.constexpr, SPLIT: gl.constexpr):
    split = gl.program_id(0)
    pair = gl.program_id(1)
    pairs = Hkv // 2
    b = pair // pairs
    kvh = (pair % pairs) * 2
    Sk = gl.load(SEQLENS + b)
    tiles = ((Sk + BN - 1) // BN + n_splits - 1) // n_splits
    lo = gl.minimum(split * tiles * BN, Sk)
    hi = gl.minimum(lo + tiles * BN, Sk)
    n_tiles = (hi - lo + BN - 1) // BN

    ld: gl.constexpr = gl.BlockedLayout([1, 16], [4, 8], [NUM_WARPS, 1], [1, 0])
    s_mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1],
                                                    instr_shape=[16, NQ, 32])
    o_mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1],
                                                    instr_shape=[16, NQ, 16])
    sl8: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8, rank=2)
    sl16: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    sl16p: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=32, element_bitwidth=16, rank=2)

    q0, c0 = _queries(Q, QD, KD, b, kvh, Hkv, stride_qb, stride_qs, stride_qh, qk_scale_log2, SQ, GROUP, D, NQ,
                      Q_FP8, ld, s_mma)
    q1, c1 = _queries(Q, QD, KD, b, kvh + 1, Hkv, stride_qb, stride_qs, stride_qh, qk_scale_log2, SQ, GROUP, D, NQ,
                      Q_FP8, ld, s_mma)
    q0_s = gl.allocate_shared_memory(gl.float8e4nv, [NQ, D], sl8, q0)
    q1_s = gl.allocate_shared_memory(gl.float8e4nv, [NQ, D], sl8, q1)
    r_s = gl.arange(0, NQ, layout=gl.SliceLayout(0, s_mma))
    limit = Sk - SQ + r_s % SQ
    k_s = gl.allocate_shared_memory(gl.float8e4nv, [2 * STAGES, BN, D], sl8)     # stage s: heads at 2s, 2s + 1
    v_s = gl.allocate_shared_memory(gl.float8e4nv, [2 * STAGES, BN, DV], sl8)
    w_s = gl.allocate_shared_memory(gl.float16, [BN, DV], sl16)
    p_s = gl.allocate_shared_memory(gl.float16, [NQ, BN], sl16p)

    table = TABLE + b * table_stride
    offs_n = gl.arange(0, BN, layout=gl.SliceLayout(1, ld))
    offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, ld))
    offs_dv = gl.arange(0, DV, layout=gl.SliceLayout(0, ld))
    k_base = K + kvh * stride_kh
    v_base = V + kvh * stride_vh
    for i in gl.static_range(STAGES - 1):
        keys = lo + i * BN + offs_n
        rows, toks = _cache_rows(table, b, keys, hi, PAGE)
        _copy_two(k_s, v_s, k_base, v_base, stride_kh, stride_vh, rows, toks, keys, hi, stride_kr, stride_kt,
                  stride_vr, stride_vt, offs_d, offs_dv, i)
    rows, toks = _cache_rows(table, b, lo + (STAGES - 1) * BN + offs_n, hi, PAGE)

    acc0 = gl.zeros([DV, NQ], gl.float32, layout=o_mma)
    acc1 = gl.zeros([DV, NQ], gl.float32, layout=o_mma)
    m0 = gl.full([NQ], _NEG_FLOOR, gl.float32, layout=gl.SliceLayout(0, s_mma))
    m1 = gl.full([NQ], _NEG_FLOOR, gl.float32, layout=gl.SliceLayout(0, s_mma))
    l0 = gl.zeros([NQ], gl.float32, layout=gl.SliceLayout(0, s_mma))
    l1 = gl.zeros([NQ], gl.float32, layout=gl.SliceLayout(0, s_mma))
    for j in range(n_tiles):
        ahead = j + STAGES - 1
        keys = lo + ahead * BN + offs_n
        _copy_two(k_s, v_s, k_base, v_base, stride_kh, stride_vh, rows, toks, keys, hi, stride_kr, stride_kt,
                  stride_vr, stride_vt, offs_d, offs_dv, ahead % STAGES)
        rows, toks = _cache_rows(table, b, keys + BN, hi, PAGE)
        async_copy.wait_group(STAGES - 1)
        gl.thread_barrier()
        hopper.fence_async_shared()
        cur = j % STAGES
        tile_keys = lo + j * BN + gl.arange(0, BN, layout=gl.SliceLayout(1, s_mma))
        acc0, m0, l0 = _step(k_s.index(2 * cur), v_s.index(2 * cur), q0_s, w_s, p_s, acc0, m0, l0, c0, tile_keys, hi,
                             limit, CAUSAL, BN, NQ, ld, s_mma, o_mma)
        acc1, m1, l1 = _step(k_s.index(2 * cur + 1), v_s.index(2 * cur + 1), q1_s, w_s, p_s, acc1, m1, l1, c1,
                             tile_keys, hi, limit, CAUSAL, BN, NQ, ld, s_mma, o_mma)
    async_copy.wait_group(0)
    gl.thread_barrier()
    bk = b * Hkv + kvh
    _write(acc0, m0, l0, O, LSE, O_PART, LSE_PART, VD, b, kvh, bk, split, n_splits, Hq, Hkv, stride_ob, stride_os,
           stride_oh, SQ, GROUP, DV, NQ, SPLIT, s_mma)
    _write(acc1, m1, l1, O, LSE, O_PART, LSE_PART, VD, b, kvh + 1, bk + 1, split, n_splits, Hq, Hkv, stride_ob,
           stride_os, stride_oh, SQ, GROUP, DV, NQ, SPLIT, s_mma)


def two_heads_decode(q, k_cache, v_cache, cache_seqlens, q_descale, k_descale, v_descale, splits=1, block_n=64,
                     stages=3, block_table=None, causal=True):
    """(out, lse) as zyfa.flash_attn_with_kvcache returns them (E4M3 q with descales (B, Hkv))."""
    from zyfa.triton_kernels.decode import merge_kernel
    B, Sq, Hq, D = q.shape
    Hkv, Dv = k_cache.shape[2], v_cache.shape[-1]
    group, rows, dev = Hq // Hkv, Hq // Hkv * Sq, q.device
    assert Hkv % 2 == 0 and rows <= ROWS
    page = k_cache.shape[1] if block_table is not None else 0
    out = torch.empty(B, Sq, Hq, Dv, dtype=torch.bfloat16, device=dev)
    lse = torch.empty(B, Hq, Sq, dtype=torch.float32, device=dev)
    o_part = torch.empty(B * Hkv, splits, rows, Dv, dtype=torch.float32, device=dev) if splits > 1 else lse
    lse_part = torch.empty(B * Hkv, splits, rows, dtype=torch.float32, device=dev) if splits > 1 else lse
    ds = [d.float().contiguous() for d in (q_descale, k_descale, v_descale)]
    table = block_table if block_table is not None else cache_seqlens
    two_heads_kernel[(splits, B * Hkv // 2)](
        q, k_cache, v_cache, *ds, out, lse, o_part, lse_part, cache_seqlens, table,
        q.stride(0), q.stride(1), q.stride(2), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), out.stride(0), out.stride(1), out.stride(2),
        table.stride(0) if block_table is not None else 0, splits, Hq, Hkv, LOG2E / math.sqrt(D),
        SQ=Sq, GROUP=group, D=D, DV=Dv, NQ=ROWS, BN=block_n, STAGES=stages, PAGE=page, Q_FP8=True, CAUSAL=causal,
        SPLIT=splits > 1, num_warps=NUM_WARPS.value)
    if splits > 1:
        merge_kernel[(B * Hkv * rows,)](o_part, lse_part, out, lse, splits, Hq, Hkv, out.stride(0), out.stride(1),
                                        out.stride(2), SQ=Sq, GROUP=group, DV=Dv,
                                        SPLITS=triton.next_power_of_2(splits), num_warps=1)
    return out, lse
