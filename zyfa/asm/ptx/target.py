"""PTX for sm_90a: the op table and register kinds of zyfa's generators.

Float adds and multiplies carry an explicit ``.rn``: without a rounding modifier ptxas may
contract a multiply and an add into one FMA, which would change the bits the spec fixes.
"""
from __future__ import annotations

import struct

from ..program import Program, Target

# register kind -> PTX type; names are %<kind>_<n>, e.g. %f32_3, %b32_0, %pred_1
KINDS = {"f32": ".f32", "b16": ".b16", "b32": ".b32", "u32": ".u32", "u64": ".u64", "pred": ".pred"}

OPS = {
    "ld.param.u64": "ld.param.u64 {0}, [{1}];",
    "ld.param.u32": "ld.param.u32 {0}, [{1}];",
    "mov.u32": "mov.u32 {0}, {1};",
    "mad.lo.u32": "mad.lo.u32 {0}, {1}, {2}, {3};",
    "mul.wide.u32": "mul.wide.u32 {0}, {1}, {2};",
    "add.u64": "add.u64 {0}, {1}, {2};",
    "setp.ge.u32": "setp.ge.u32 {0}, {1}, {2};",
    "bra": "bra.uni {0};",
    "ret": "ret;",
    "ld.global.v4.f32": "ld.global.nc.v4.f32 {{{0}, {1}, {2}, {3}}}, [{4}];",
    "st.global.b32": "st.global.b32 [{0}], {1};",
    "st.global.v4.b32": "st.global.v4.b32 [{0}], {{{1}, {2}, {3}, {4}}};",
    "add.f32": "add.rn.f32 {0}, {1}, {2};",
    "sub.f32": "sub.rn.f32 {0}, {1}, {2};",
    "mul.f32": "mul.rn.f32 {0}, {1}, {2};",
    "neg.f32": "neg.f32 {0}, {1};",                 # a free operand modifier where an FFMA reads it
    "neg.s32": "neg.s32 {0}, {1};",                 # int8_qk: a row of int32 scores flipped
    "fma.f32": "fma.rn.f32 {0}, {1}, {2}, {3};",
    "fma.rp.f32": "fma.rp.f32 {0}, {1}, {2}, {3};",  # int8_qk: the block max rounded up onto a grid
    "sub.rm.f32": "sub.rm.f32 {0}, {1}, {2};",       # int8_qk: the exact rule's addend rounded down
    "max.f32": "max.f32 {0}, {1}, {2};",
    "prmt.b32": "prmt.b32 {0}, {1}, {2}, {3};",
    # integer and address arithmetic
    "mov.b64": "mov.b64 {0}, {1};",
    "cvta.param.u64": "cvta.param.u64 {0}, {1};",
    "cvt.u64.u32": "cvt.u64.u32 {0}, {1};",
    "add.u32": "add.u32 {0}, {1}, {2};",
    "mul.lo.u32": "mul.lo.u32 {0}, {1}, {2};",
    "mul.hi.u32": "mul.hi.u32 {0}, {1}, {2};",
    "shr.u32": "shr.u32 {0}, {1}, {2};",
    "and.b32": "and.b32 {0}, {1}, {2};",
    "shr.u64": "shr.u64 {0}, {1}, {2};",
    "and.b64": "and.b64 {0}, {1}, {2};",
    "or.b64": "or.b64 {0}, {1}, {2};",
    "setp.eq.u32": "setp.eq.u32 {0}, {1}, {2};",
    "st.global.v2.f32": "st.global.v2.f32 [{0}], {{{1}, {2}}};",
    # barriers, TMA and the tensor cores
    "bar.sync": "bar.sync {0};",
    # named barriers with a thread count: {0} barrier id (a register or an immediate), {1} threads
    "bar.sync.n": "bar.sync {0}, {1};",
    "bar.arrive.n": "bar.arrive {0}, {1};",
    "mbarrier.arrive": "mbarrier.arrive.shared::cta.b64 _, [{0}];",
    # warp specialization: hand registers between warpgroups ({0}: the new per-thread count)
    "setmaxnreg.inc": "setmaxnreg.inc.sync.aligned.u32 {0};",
    "setmaxnreg.dec": "setmaxnreg.dec.sync.aligned.u32 {0};",
    "mbarrier.init": "mbarrier.init.shared::cta.b64 [{0}], {1};",
    "fence.mbarrier_init": "fence.mbarrier_init.release.cluster;",
    "fence.proxy.async": "fence.proxy.async.shared::cta;",
    "mbarrier.expect_tx": "mbarrier.arrive.expect_tx.shared::cta.b64 _, [{0}], {1};",
    "mbarrier.try_wait": "mbarrier.try_wait.parity.shared::cta.b64 {0}, [{1}], {2};",
    "tma.load.2d": "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [{0}], [{1}, {{{2}, {3}}}], [{4}];",
    "wgmma.fence": "wgmma.fence.sync.aligned;",
    "wgmma.commit": "wgmma.commit_group.sync.aligned;",
    "wgmma.wait": "wgmma.wait_group.sync.aligned {0};",
    # {0}: the accumulator list, {1}/{2}: A/B descriptors, {3}: scale-d (0: D = A.B, 1: D += A.B)
    "wgmma.m64n64k32.e4m3.ss": "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {{{0}}}, {1}, {2}, {3}, 1, 1;",
    "wgmma.m64n128k32.e4m3.ss": "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {{{0}}}, {1}, {2}, {3}, 1, 1;",
    "wgmma.m64n160k32.e4m3.ss": "wgmma.mma_async.sync.aligned.m64n160k32.f32.e4m3.e4m3 {{{0}}}, {1}, {2}, {3}, 1, 1;",
    # int8 Q and K (the INT8 Q.K^T mode): int32 accumulators (.b32 registers), no scale operands
    "wgmma.m64n128k32.s8.ss": "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {{{0}}}, {1}, {2}, {3};",
    # A from four registers of packed E4M3 ({1}: "a0, a1, a2, a3")
    "wgmma.m64n128k32.e4m3.rs": "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {{{0}}}, {{{1}}}, {2}, {3}, 1, 1;",
    "wgmma.m64n64k32.e4m3.rs": "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {{{0}}}, {{{1}}}, {2}, {3}, 1, 1;",
    "wgmma.m64n8k16.f16.rs": "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {{{0}}}, {{{1}}}, {2}, {3}, 1, 1, 0;",
    "wgmma.m64n8k32.e4m3.rs": "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {{{0}}}, {{{1}}}, {2}, {3}, 1, 1;",
    # 16-bit inputs: S = Q K^T with both operands K-major (trans 0, 0); P V with P from four
    # registers of packed pairs and V as stored, MN-major (imm-trans-b 1)
    "wgmma.m64n128k16.bf16.ss": "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{{0}}}, {1}, {2}, {3}, 1, 1, 0, 0;",
    "wgmma.m64n128k16.f16.ss": "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {{{0}}}, {1}, {2}, {3}, 1, 1, 0, 0;",
    "wgmma.m64n128k16.bf16.rs.t": "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{{0}}}, {{{1}}}, {2}, {3}, 1, 1, 1;",
    "wgmma.m64n128k16.f16.rs.t": "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {{{0}}}, {{{1}}}, {2}, {3}, 1, 1, 1;",
    "wgmma.m64n64k16.bf16.ss": "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{{0}}}, {1}, {2}, {3}, 1, 1, 0, 0;",
    "wgmma.m64n64k16.f16.ss": "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {{{0}}}, {1}, {2}, {3}, 1, 1, 0, 0;",
    "wgmma.m64n256k16.bf16.rs.t": "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {{{0}}}, {{{1}}}, {2}, {3}, 1, 1, 1;",
    "wgmma.m64n256k16.f16.rs.t": "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {{{0}}}, {{{1}}}, {2}, {3}, 1, 1, 1;",
    "wgmma.m64n64k16.bf16.rs.t": "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{{0}}}, {{{1}}}, {2}, {3}, 1, 1, 1;",
    "wgmma.m64n64k16.f16.rs.t": "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {{{0}}}, {{{1}}}, {2}, {3}, 1, 1, 1;",
    "st.shared.v2.b32": "st.shared.v2.b32 [{0}], {{{1}, {2}}};",
    "tma.load.3d": "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [{0}], [{1}, {{{2}, {3}, {4}}}], [{5}];",
    "tma.load.4d": "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [{0}], [{1}, {{{2}, {3}, {4}, {5}}}], [{6}];",
    "tma.load.5d": "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [{0}], [{1}, {{{2}, {3}, {4}, {5}, {6}}}], [{7}];",
    # the same box into L2 only (no shared memory, no mbarrier): {0} the map, {1}-{4} the coordinates
    "tma.prefetch.4d": "cp.async.bulk.prefetch.tensor.4d.L2.global.tile [{0}, {{{1}, {2}, {3}, {4}}}];",
    # more integer, float and control ops of the attention kernel
    "mov.f32": "mov.f32 {0}, {1};",
    "mov.b32": "mov.b32 {0}, {1};",
    "sub.u32": "sub.u32 {0}, {1}, {2};",
    "sub.s32": "sub.s32 {0}, {1}, {2};",
    "div.u32": "div.u32 {0}, {1}, {2};",
    "rem.u32": "rem.u32 {0}, {1}, {2};",
    "min.u32": "min.u32 {0}, {1}, {2};",
    "shl.b32": "shl.b32 {0}, {1}, {2};",
    "xor.b32": "xor.b32 {0}, {1}, {2};",
    "setp.lt.u32": "setp.lt.u32 {0}, {1}, {2};",
    "setp.lt.s32": "setp.lt.s32 {0}, {1}, {2};",
    "setp.gt.f32": "setp.gt.f32 {0}, {1}, {2};",
    "setp.gt.u32": "setp.gt.u32 {0}, {1}, {2};",
    "setp.neu.f32": "setp.neu.f32 {0}, {1}, {2};",
    "and.pred": "and.pred {0}, {1}, {2};",
    "or.pred": "or.pred {0}, {1}, {2};",
    "vote.any": "vote.sync.any.pred {0}, {1}, -1;",
    "selp.f32": "selp.f32 {0}, {1}, {2}, {3};",
    "selp.b32": "selp.b32 {0}, {1}, {2}, {3};",
    "max.nan.f32": "max.NaN.f32 {0}, {1}, {2};",
    "ex2.f32": "ex2.approx.ftz.f32 {0}, {1};",
    "lg2.f32": "lg2.approx.ftz.f32 {0}, {1};",
    "rcp.f32": "rcp.rn.f32 {0}, {1};",
    "shfl.bfly": "shfl.sync.bfly.b32 {0}, {1}, {2}, 31, -1;",
    "shfl.idx0": "shfl.sync.idx.b32 {0}, {1}, 0, 31, -1;",       # lane 0's value: warp-uniform to ptxas
    "cvt.bf16x2.f32": "cvt.rn.bf16x2.f32 {0}, {1}, {2};",      # {1} -> upper half, {2} -> lower
    "ld.global.f32": "ld.global.nc.f32 {0}, [{1}];",
    "ld.global.u32": "ld.global.nc.u32 {0}, [{1}];",
    "atom.global.add.u32": "atom.global.add.u32 {0}, [{1}], {2};",
    "ld.global.v2.f32": "ld.global.nc.v2.f32 {{{0}, {1}}}, [{2}];",
    "st.global.f32": "st.global.f32 [{0}], {1};",
    "ld.shared.b32": "ld.shared.b32 {0}, [{1}];",
    "ld.shared.v4.b32": "ld.shared.v4.b32 {{{0}, {1}, {2}, {3}}}, [{4}];",
    "st.shared.v4.b32": "st.shared.v4.b32 [{0}], {{{1}, {2}, {3}, {4}}};",
    "ld.global.v4.b32": "ld.global.nc.v4.b32 {{{0}, {1}, {2}, {3}}}, [{4}];",
    # four 8 x 8 tiles of 16-bit pairs from the wgmma fragment; lanes 8i..8i+7 give tile i's row addresses
    "stmatrix.x4": "stmatrix.sync.aligned.m8n8.x4.shared.b16 [{0}], {{{1}, {2}, {3}, {4}}};",
    # the transpose: lanes 8i..8i+7 give tile i's row addresses; lane t gets rows 2 (t % 4), +1 of column t / 4
    "ldmatrix.x4.trans": "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{{0}, {1}, {2}, {3}}}, [{4}];",
    "bar.warp.sync": "bar.warp.sync -1;",
    "setp.gt.s32": "setp.gt.s32 {0}, {1}, {2};",
    "st.shared.b32": "st.shared.b32 [{0}], {1};",
    "st.shared.f32": "st.shared.f32 [{0}], {1};",
    "setp.lt.f32": "setp.lt.f32 {0}, {1}, {2};",
    "setp.eq.f32": "setp.eq.f32 {0}, {1}, {2};",
    "bra.div": "bra {0};",                      # a branch threads of a warp may take apart
    # packed half precision (two values a register; .rn keeps ptxas from contracting add + mul)
    "cvt.f16x2.f32": "cvt.rn.f16x2.f32 {0}, {1}, {2};",     # {1} -> upper half, {2} -> lower
    "max.f16x2": "max.f16x2 {0}, {1}, {2};",
    "add.f16x2": "add.rn.f16x2 {0}, {1}, {2};",
    "sub.f16x2": "sub.rn.f16x2 {0}, {1}, {2};",
    "fma.f16x2": "fma.rn.f16x2 {0}, {1}, {2}, {3};",
    # the exact rule: MUFU exp2, then the hardware's round-to-nearest-even into E4M3 pairs
    "cvt.e4m3x2.f32": "cvt.rn.satfinite.e4m3x2.f32 {0}, {1}, {2};",   # {1} -> upper byte, {2} -> lower
    "cvt.f16x2.e4m3x2": "cvt.rn.f16x2.e4m3x2 {0}, {1};",            # lower byte -> lower half
    "mov.b32.pack": "mov.b32 {0}, {{{1}, {2}}};",                   # two b16: {1} lower, {2} upper
    "mov.b32.unpack": "mov.b32 {{{0}, {1}}}, {2};",                 # {0} lower, {1} upper half
    "shr.b32": "shr.b32 {0}, {1}, {2};",
    # a sliding window's bounds (window.py): signed key indices, tests of both edges
    "max.s32": "max.s32 {0}, {1}, {2};",
    "min.s32": "min.s32 {0}, {1}, {2};",
    "shr.s32": "shr.s32 {0}, {1}, {2};",
    "setp.gt.or.s32": "setp.gt.or.s32 {0}, {1}, {2}, {3};",        # {0} = {1} > {2} or {3}
    "setp.lt.or.u32": "setp.lt.or.u32 {0}, {1}, {2}, {3};",
    "setp.ge.and.u32": "setp.ge.and.u32 {0}, {1}, {2}, {3};",      # {0} = {1} >= {2} and {3}
}


def f32(x: float) -> str:
    """A float32 immediate, bit-exact (PTX's 0fXXXXXXXX form)."""
    return "0f%08X" % struct.unpack("<I", struct.pack("<f", x))[0]


TARGET = Target(ops=OPS, reg_name=lambda kind, i: f"%{kind}_{i}",
                declare=lambda kind, n: f"\t.reg {KINDS[kind]} %{kind}_<{n}>;", kinds=tuple(KINDS))


def program() -> Program:
    return Program(TARGET)


def module(name: str, params: list[tuple[str, str]], prog: Program, arch: str = "sm_90a",
           shared: list[str] = (), directives: str = "") -> str:
    """A PTX module holding one kernel; ``params`` are (PTX type, name) pairs, ``shared``
    module-level shared-memory declarations, ``directives`` the entry's performance-tuning
    directives (e.g. ".maxnreg 168")."""
    plist = ",\n".join(f"\t.param {t} {n}" for t, n in params)
    return "\n".join([".version 8.0", f".target {arch}", ".address_size 64", "", *shared, "",
                      f".visible .entry {name}(\n{plist}\n){' ' + directives if directives else ''}", "{", *prog.declarations(), *prog.body, "}", ""])


# the 64-bit wgmma shared-memory descriptor: start address >> 4 in bits 0-13, leading byte
# offset >> 4 in 16-29, stride byte offset >> 4 in 32-45, swizzle mode in 62-63 (1 = 128 B)
SWIZZLE_128B, SWIZZLE_64B = 1, 2


def descriptor_bits(stride_bytes: int, swizzle: int = SWIZZLE_128B, leading_bytes: int = 0) -> int:
    """The descriptor without its start address (OR the address >> 4 into bits 0-13). The
    leading byte offset is unused for K-major swizzled tiles (0, as Triton 3.6 writes it); for
    an MN-major 16-bit tile it is the distance between its 64-element column tiles, and the
    stride byte offset that between groups of 8 K rows (as Triton 3.6 writes them for a
    row-major B)."""
    return (swizzle << 62) | ((stride_bytes >> 4) << 32) | ((leading_bytes >> 4) << 16)
