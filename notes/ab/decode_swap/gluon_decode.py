"""Lab (session o, CPU-compiled only, never run): the E4M3 decode step in Gluon, keys in M.

Dense cache (batch, tokens, kv_heads, 128), one query a sequence (GROUP rows padded to NQ), q
given in E4M3 with descales per (sequence, kv head), splits writing decode_kernel's partials
(merge with zyfa.triton_kernels.decode.merge_kernel). Per 64-key tile: K and V bytes by cp.async
in STAGES stages; S^T = K q^T (E4M3 wgmma, m64nNQk32); the softmax on S^T (running max, P by the
exact rule against it, unrounded sums: decode_fp8_spec's arithmetic); V widened to FP16 in shared
memory; O^T += V^T P^T (FP16 wgmma, V^T M-major). notes/decode.md, "What run 55 leaves".
"""
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia import hopper
from triton.experimental.gluon.language.nvidia.ampere import async_copy

from zyfa.spec import constants as C

NEG_FLOOR = gl.constexpr(C.NEG_FLOOR)
LN2 = gl.constexpr(C.LN2)


@gluon.jit
def gluon_decode_kernel(Q, K, V, QD, KD, VD, O_PART, LSE_PART, SEQLENS,
                        stride_qb, stride_qh, stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh,
                        n_splits, Hkv, qk_scale_log2,
                        GROUP: gl.constexpr, D: gl.constexpr, DV: gl.constexpr, BN: gl.constexpr,
                        NQ: gl.constexpr, STAGES: gl.constexpr):
    split = gl.program_id(0)
    bk = gl.program_id(1)
    b = bk // Hkv
    kvh = bk % Hkv
    Sk = gl.load(SEQLENS + b)
    tiles = gl.cdiv(gl.cdiv(Sk, BN), n_splits)
    lo = gl.minimum(split * tiles * BN, Sk)
    hi = gl.minimum(lo + tiles * BN, Sk)
    n_tiles = gl.cdiv(hi - lo, BN)

    ld: gl.constexpr = gl.BlockedLayout([1, 16], [4, 8], [4, 1], [1, 0])       # 16 bytes a thread
    s_mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, NQ, 32])
    o_mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, NQ, 16])
    sl8: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8, rank=2)
    sl16: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    sl16p: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=32, element_bitwidth=16, rank=2)

    rows = gl.arange(0, NQ, layout=gl.SliceLayout(1, ld))
    cols = gl.arange(0, D, layout=gl.SliceLayout(0, ld))
    q = gl.load(Q + b * stride_qb + (kvh * GROUP + rows)[:, None] * stride_qh + cols[None, :],
                mask=(rows < GROUP)[:, None], other=0.0)
    q_s = gl.allocate_shared_memory(gl.float8e4nv, [NQ, D], sl8, q)
    c = gl.load(QD + b * Hkv + kvh) * gl.load(KD + b * Hkv + kvh) * qk_scale_log2

    k_s = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, BN, D], sl8)
    v_s = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, BN, DV], sl8)
    w_s = gl.allocate_shared_memory(gl.float16, [BN, DV], sl16)
    p_s = gl.allocate_shared_memory(gl.float16, [NQ, BN], sl16p)

    offs_n = gl.arange(0, BN, layout=gl.SliceLayout(1, ld))
    offs_d = gl.arange(0, D, layout=gl.SliceLayout(0, ld))
    k_base = K + b.to(gl.int64) * stride_kb + kvh * stride_kh
    v_base = V + b.to(gl.int64) * stride_vb + kvh * stride_vh
    for i in gl.static_range(STAGES - 1):
        keys = lo + i * BN + offs_n
        ok = (keys < hi)[:, None] & (offs_d < D)[None, :]
        async_copy.async_copy_global_to_shared(k_s.index(i), k_base + keys[:, None] * stride_kt + offs_d[None, :],
                                               mask=ok)
        async_copy.async_copy_global_to_shared(v_s.index(i), v_base + keys[:, None] * stride_vt + offs_d[None, :],
                                               mask=ok)
        async_copy.commit_group()

    acc = gl.zeros([DV, NQ], gl.float32, layout=o_mma)
    m_i = gl.full([NQ], NEG_FLOOR, gl.float32, layout=gl.SliceLayout(0, s_mma))
    l_i = gl.zeros([NQ], gl.float32, layout=gl.SliceLayout(0, s_mma))
    for j in range(n_tiles):
        ahead = j + STAGES - 1
        keys = lo + ahead * BN + offs_n
        ok = (keys < hi)[:, None] & (offs_d < D)[None, :]
        async_copy.async_copy_global_to_shared(k_s.index(ahead % STAGES),
                                               k_base + keys[:, None] * stride_kt + offs_d[None, :], mask=ok)
        async_copy.async_copy_global_to_shared(v_s.index(ahead % STAGES),
                                               v_base + keys[:, None] * stride_vt + offs_d[None, :], mask=ok)
        async_copy.commit_group()
        async_copy.wait_group(STAGES - 1)
        gl.thread_barrier()
        hopper.fence_async_shared()
        cur = j % STAGES
        s_t = hopper.warpgroup_mma(k_s.index(cur), q_s.permute((1, 0)), gl.zeros([BN, NQ], gl.float32, layout=s_mma))
        w_s.store(v_s.index(cur).load(ld).to(gl.float16))           # V widened: exact
        tile_keys = lo + j * BN + gl.arange(0, BN, layout=gl.SliceLayout(1, s_mma))
        valid = (tile_keys < hi)[:, None]
        t = gl.where(valid, s_t * c, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(t, axis=0))
        alpha = gl.exp2(m_i - m_new)
        y = gl.where(valid, gl.fma(s_t, c, -(m_new - 8.0)[None, :]), float("-inf"))
        e = gl.exp2(y)
        l_i = l_i * alpha + gl.sum(e, axis=0)
        p = e.to(gl.float8e4nv).to(gl.float16)                         # the exact rule, then FP16 (exact)
        p_s.store(gl.permute(p, (1, 0)))
        hopper.fence_async_shared()
        gl.thread_barrier()
        alpha_o = gl.convert_layout(alpha, gl.SliceLayout(0, o_mma))
        acc = hopper.warpgroup_mma(w_s.permute((1, 0)), p_s.permute((1, 0)), acc * alpha_o[None, :])
        gl.thread_barrier()
        m_i = m_new

    m_ref = m_i - 8.0
    seen = l_i > 0
    l_safe = gl.where(seen, l_i, 1.0)
    lse = gl.where(seen, LN2 * (m_ref + gl.log2(l_safe)), float("-inf"))
    out_l: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [4, 1], [1, 0])
    out_t = gl.convert_layout(acc * gl.load(VD + b * Hkv + kvh), out_l) / \
        gl.convert_layout(l_safe, gl.SliceLayout(0, out_l))[None, :]
    part = bk * n_splits + split
    r = gl.arange(0, NQ, layout=gl.SliceLayout(0, out_l))
    dv = gl.arange(0, DV, layout=gl.SliceLayout(1, out_l))
    gl.store(O_PART + (part * GROUP + r)[None, :] * DV + dv[:, None], out_t, mask=(r < GROUP)[None, :])
    rl = gl.arange(0, NQ, layout=gl.SliceLayout(0, s_mma))
    gl.store(LSE_PART + part * GROUP + rl, lse, mask=rl < GROUP)


def compile_sm90(stages: int = 3, bn: int = 64, nq: int = 16):
    """The kernel compiled for sm_90a on the CPU (GQA 4, d128): (compiled kernel, SASS)."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from zyfa.asm.ptx.assemble import sass
    names = ["Q", "K", "V", "QD", "KD", "VD", "O_PART", "LSE_PART", "SEQLENS", "stride_qb", "stride_qh", "stride_kb",
             "stride_kt", "stride_kh", "stride_vb", "stride_vt", "stride_vh", "n_splits", "Hkv", "qk_scale_log2",
             "GROUP", "D", "DV", "BN", "NQ", "STAGES"]
    types = ["*fp8e4nv"] * 3 + ["*fp32"] * 5 + ["*i32"] + ["i32"] * 10 + ["fp32"] + ["constexpr"] * 6
    sig = dict(zip(names, types))
    consts = dict(GROUP=4, D=128, DV=128, BN=bn, NQ=nq, STAGES=stages)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in names[:9] + [n for n in names if n.startswith("stride")]}
    k = triton.compile(GluonASTSource(gluon_decode_kernel, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": 4})
    return k, sass(k.asm["cubin"])


if __name__ == "__main__":
    import collections
    import re
    k, code = compile_sm90()
    print(collections.Counter(re.findall(r"\*/\s+(?:@!?P\d )?([A-Z][A-Z0-9._]*)", code)).most_common(25))


def gluon_decode(q, k_cache, v_cache, cache_seqlens, q_descale, k_descale, v_descale, splits=1, block_n=64,
                 stages=3, softmax_scale=None):
    """One query a sequence, dense E4M3 cache, E4M3 q with descales (batch, kv_heads): (out, lse) as
    triton_decode returns them, the splits merged by the package's merge_kernel."""
    import math
    import torch
    from zyfa.spec.constants import LOG2E
    from zyfa.triton_kernels.decode import merge_kernel
    B, Sq, Hq, D = q.shape
    Hkv, Dv = k_cache.shape[2], v_cache.shape[-1]
    group = Hq // Hkv
    assert Sq == 1 and group <= 16 and D == Dv == 128 and q.dtype == torch.float8_e4m3fn
    dev = q.device
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    o_part = torch.empty(B * Hkv, splits, group, Dv, dtype=torch.float32, device=dev)
    lse_part = torch.empty(B * Hkv, splits, group, dtype=torch.float32, device=dev)
    gluon_decode_kernel[(splits, B * Hkv)](
        q, k_cache, v_cache, q_descale.float().contiguous(), k_descale.float().contiguous(),
        v_descale.float().contiguous(), o_part, lse_part, cache_seqlens, q.stride(0), q.stride(2),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), v_cache.stride(0), v_cache.stride(1),
        v_cache.stride(2), splits, Hkv, scale * LOG2E, GROUP=group, D=D, DV=Dv, BN=block_n, NQ=16, STAGES=stages,
        num_warps=4)
    out = torch.empty(B, 1, Hq, Dv, dtype=torch.bfloat16, device=dev)
    lse = torch.empty(B, Hq, 1, dtype=torch.float32, device=dev)
    merge_kernel[(B * Hkv * group,)](o_part, lse_part, out, lse, splits, Hq, Hkv, out.stride(0), out.stride(1),
                                    out.stride(2), SQ=1, GROUP=group, DV=Dv,
                                    SPLITS=max(2, 1 << (splits - 1).bit_length()), num_warps=1)
    return out, lse
