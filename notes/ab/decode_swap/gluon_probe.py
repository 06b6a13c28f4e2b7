import re, sys
from collections import Counter
sys.path.insert(0, "/work/main")
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia import hopper
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon._runtime import GluonASTSource
from triton.backends.compiler import GPUTarget
from zyfa.asm.ptx.assemble import sass

@gluon.jit
def probe(V, P, O, BN: gl.constexpr, DV: gl.constexpr, N: gl.constexpr):
    # V bytes -> shared (cp.async, 16 B a thread), widened to f16 in a second shared buffer,
    # then O^T = V^T P^T as an f16 wgmma with V^T M-major from shared memory
    ld: gl.constexpr = gl.BlockedLayout([1, 16], [4, 8], [4, 1], [1, 0])
    offs_n = gl.arange(0, BN, layout=gl.SliceLayout(1, ld))
    offs_d = gl.arange(0, DV, layout=gl.SliceLayout(0, ld))
    raw_sl: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8, rank=2)
    v_raw = gl.allocate_shared_memory(gl.float8e4nv, [BN, DV], raw_sl)
    async_copy.async_copy_global_to_shared(v_raw, V + offs_n[:, None] * DV + offs_d[None, :])
    async_copy.commit_group()
    async_copy.wait_group(0)
    gl.thread_barrier()
    v8 = v_raw.load(ld)
    v16 = v8.to(gl.float16)
    w_sl: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    v_wide = gl.allocate_shared_memory(gl.float16, [BN, DV], w_sl, v16)
    pl: gl.constexpr = gl.BlockedLayout([1, 8], [8, 4], [4, 1], [1, 0])
    offs_m = gl.arange(0, N, layout=gl.SliceLayout(1, pl))
    offs_k = gl.arange(0, BN, layout=gl.SliceLayout(0, pl))
    p = gl.load(P + offs_m[:, None] * BN + offs_k[None, :])          # (N, BN) f16
    p_s = gl.allocate_shared_memory(gl.float16, [N, BN], w_sl, p)
    hopper.fence_async_shared()
    gl.thread_barrier()
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, N, 16])
    acc = gl.zeros([DV, N], gl.float32, layout=mma)
    acc = hopper.warpgroup_mma(v_wide.permute((1, 0)), p_s.permute((1, 0)), acc)
    ol: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0])
    acc = gl.convert_layout(acc, ol)
    offs_o = gl.arange(0, DV, layout=gl.SliceLayout(1, ol))
    offs_c = gl.arange(0, N, layout=gl.SliceLayout(0, ol))
    gl.store(O + offs_o[:, None] * N + offs_c[None, :], acc)

sig = dict(V="*fp8e4nv", P="*fp16", O="*fp32", BN="constexpr", DV="constexpr", N="constexpr")
attrs = {(i,): [["tt.divisibility", 16]] for i in range(3)}
k = triton.compile(GluonASTSource(probe, sig, dict(BN=64, DV=128, N=16), attrs), target=GPUTarget("cuda", 90, 32),
                   options={"num_warps": 4})
code = sass(k.asm["cubin"])
print(Counter(re.findall(r"\*/\s+(?:@!?P\d )?([A-Z][A-Z0-9._]*)", code)).most_common(20))
print(re.findall(r"wgmma[^\n]*", k.asm["ptx"])[:3])
