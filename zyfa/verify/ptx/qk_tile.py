"""A building block of the generated attention kernel: one 64x64 tile of S = Q K^T in FP8.

Q and K tiles (64 rows x 128 E4M3 values = 128 bytes) arrive by TMA into 128-byte-swizzled
shared memory, signalled by an mbarrier; one warpgroup multiplies them with four
``wgmma m64n64k32 e4m3`` steps (both operands from shared-memory descriptors) and writes the
float32 accumulator fragment to global memory. ``qk_tile`` runs it; tests/ptx/test_asm.py
checks it against float64.
"""
from __future__ import annotations

import ctypes
import functools

import torch

from ...asm.ptx.assemble import assemble
from ...asm.ptx.fragments import acc_column, acc_row_half
from ...asm.ptx.loader import Kernel, tensor_map
from ...asm.ptx.smem import emit_descriptor, emit_wait
from ...asm.ptx.target import module, program

ROWS = 64                 # query rows and key rows per tile
HEAD_DIM = 128            # E4M3 values = bytes per row: one 128-byte swizzle row
TILE_BYTES = ROWS * HEAD_DIM


def emit_accumulator_store(prog, acc, out_base, row_stride_bytes):
    """Store a m64nN f32 accumulator fragment where the kernels' map (asm.ptx.fragments) says
    each register's element lies: thread t of warp w, rows 16w + t%32/4 (+ 8 * acc_row_half),
    columns 2(t%4) + acc_column. qk_tile's GPU test against float64 checks that map on the
    hardware."""
    tid, warp, lane, row, col, tmp = prog.regs("u32", 6)
    addr, off = prog.regs("u64", 2)
    prog.emit("mov.u32", tid, "%tid.x")
    prog.emit("shr.u32", warp, tid, 5)
    prog.emit("and.b32", lane, tid, 31)
    prog.emit("shr.u32", row, lane, 2)
    prog.emit("mad.lo.u32", row, warp, 16, row)
    prog.emit("and.b32", col, lane, 3)
    prog.emit("mul.lo.u32", col, col, 2)
    for i in range(0, len(acc), 2):                   # registers i, i + 1: adjacent columns of one row
        r = prog.reg("u32")
        prog.emit("add.u32", r, row, 8 * acc_row_half(i))
        prog.emit("mul.lo.u32", tmp, r, row_stride_bytes // 4)
        prog.emit("add.u32", tmp, tmp, col)
        prog.emit("add.u32", tmp, tmp, acc_column(i))
        prog.emit("mul.wide.u32", off, tmp, 4)
        prog.emit("add.u64", addr, out_base, off)
        prog.emit("st.global.v2.f32", addr, acc[i], acc[i + 1])


def qk_tile_kernel(arch: str = "sm_90a") -> tuple[str, str]:
    """(name, PTX) of zyfa_qk_tile(q_map, k_map, s_ptr, q_row, k_row): 128 threads, one CTA;
    s (64 x 64 float32, row-major) = q[q_row:q_row+64] . k[k_row:k_row+64]^T."""
    name = "zyfa_qk_tile"
    prog = program()
    qmap, kmap, tmp64, s_ptr = prog.regs("u64", 4)
    tid, sq, sk, bar, q_row, k_row, zero = prog.regs("u32", 7)
    leader, accumulate = prog.regs("pred", 2)
    prog.emit("mov.b64", tmp64, "q_map")
    prog.emit("cvta.param.u64", qmap, tmp64)
    prog.emit("mov.b64", tmp64, "k_map")
    prog.emit("cvta.param.u64", kmap, tmp64)
    prog.emit("ld.param.u64", s_ptr, "s_ptr")
    prog.emit("ld.param.u32", q_row, "q_row")
    prog.emit("ld.param.u32", k_row, "k_row")
    prog.emit("mov.u32", tid, "%tid.x")
    prog.emit("setp.eq.u32", leader, tid, 0)
    prog.emit("mov.u32", sq, "zyfa_tiles")
    prog.emit("add.u32", sk, sq, TILE_BYTES)
    prog.emit("mov.u32", bar, "zyfa_bar")
    prog.emit("mov.u32", zero, 0)

    prog.comment("one thread starts both TMA loads; everyone waits on the mbarrier")
    prog.emit("mbarrier.init", bar, 1, guard=leader)
    prog.emit("fence.mbarrier_init")
    prog.emit("bar.sync", 0)
    prog.emit("mbarrier.expect_tx", bar, 2 * TILE_BYTES, guard=leader)
    prog.emit("tma.load.2d", sq, qmap, zero, q_row, bar, guard=leader)
    prog.emit("tma.load.2d", sk, kmap, zero, k_row, bar, guard=leader)
    emit_wait(prog, bar, 0, "WAIT")

    prog.comment("descriptors: 128-byte swizzle, 8-row atoms 1024 bytes apart; k steps of 32 bytes")
    da, db = emit_descriptor(prog, sq), emit_descriptor(prog, sk)
    acc = prog.regs("f32", 32)
    accs = ", ".join(str(a) for a in acc)
    prog.emit("setp.eq.u32", accumulate, zero, 0)          # true
    prog.emit("wgmma.fence")
    for k in range(HEAD_DIM // 32):
        a_k, b_k = prog.regs("u64", 2)
        prog.emit("add.u64", a_k, da, 2 * k)                # 32 bytes >> 4
        prog.emit("add.u64", b_k, db, 2 * k)
        prog.emit("wgmma.m64n64k32.e4m3.ss", accs, a_k, b_k, 0 if k == 0 else accumulate)
    prog.emit("wgmma.commit")
    prog.emit("wgmma.wait", 0)
    emit_accumulator_store(prog, acc, s_ptr, ROWS * 4)
    prog.emit("ret")
    shared = [f".shared .align 1024 .b8 zyfa_tiles[{2 * TILE_BYTES}];", ".shared .align 8 .b64 zyfa_bar;"]
    params = [(".align 64 .b8", "q_map[128]"), (".align 64 .b8", "k_map[128]"), (".u64", "s_ptr"),
              (".u32", "q_row"), (".u32", "k_row")]
    return name, module(name, params, prog, arch, shared)


@functools.cache
def _qk_tile(arch: str, device: int) -> Kernel:
    name, ptx = qk_tile_kernel(arch)
    return Kernel(assemble(ptx, arch).cubin, name, torch.device("cuda", device))


def qk_tile(q: torch.Tensor, k: torch.Tensor, q_row: int = 0, k_row: int = 0) -> torch.Tensor:
    """S (64 x 64 float32) = q[q_row:+64] . k[k_row:+64]^T for E4M3 q, k of shape (rows, 128),
    by the generated TMA + wgmma kernel."""
    for name, t in (("q", q), ("k", k)):
        if t.dtype != torch.float8_e4m3fn or t.dim() != 2 or t.shape[1] != 128 or not t.is_contiguous():
            raise ValueError(f"{name} must be a contiguous (rows, 128) float8_e4m3fn tensor")
    s = torch.empty(ROWS, ROWS, dtype=torch.float32, device=q.device)
    qm = tensor_map(q.view(torch.uint8), (ROWS, 128))
    km = tensor_map(k.view(torch.uint8), (ROWS, 128))
    _qk_tile("sm_90a", q.device.index or 0)((1,), (128,), [qm, km, ctypes.c_uint64(s.data_ptr()),
                                                          ctypes.c_uint32(q_row), ctypes.c_uint32(k_row)])
    return s
