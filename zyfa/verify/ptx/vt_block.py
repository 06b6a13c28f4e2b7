"""A building block of the generated E4M3 decode kernel, alone: a warp copies a key-major V
block (16 keys x 32 head-dim bytes) from global memory into shared memory, transposes it there
(zyfa.asm.ptx.vt_transpose: ldmatrix .trans, byte permutes, stmatrix) and writes the 32 V^T rows
of 16 bytes back (``vt_block``); and a warpgroup does a whole tile as a kernel keeps it, swizzled
in and out (``vt_tile``). tests/ptx/test_vt_transpose.py checks both on a GPU against
KEY_OF_SLOT (the CPU tests run the same PTX in zyfa.verify.ptx.evaluate)."""
from __future__ import annotations

import ctypes
import functools

import torch

from ...asm.program import Reg
from ...asm.ptx.assemble import assemble
from ...asm.ptx.loader import Kernel
from ...asm.ptx.target import module, program
from ...asm.ptx.vt_transpose import BYTES, KEYS, ROW, emit_vt_tile, emit_vt_transpose

V_STRIDE = 2 * BYTES          # shared bytes between V's key rows (16-byte aligned for ldmatrix)
VT_ROW = KEYS                 # shared bytes a V^T row: one 16-key group


REGION = KEYS * V_STRIDE + BYTES * VT_ROW      # a warp's shared bytes: its V block, then its V^T rows


def _emit_start(prog, v_ptr: Reg, vt_ptr: Reg) -> tuple[Reg, Reg, Reg, Reg]:
    """Both kernels' pointers (into ``v_ptr``, ``vt_ptr``); returns (thread, lane, v_stride, warp)."""
    emit = prog.emit
    tid, lane, stride, warp = prog.regs("u32", 4)
    emit("ld.param.u64", v_ptr, "v_ptr")
    emit("ld.param.u64", vt_ptr, "vt_ptr")
    emit("ld.param.u32", stride, "v_stride")
    emit("mov.u32", tid, "%tid.x")
    emit("and.b32", lane, tid, 31)
    emit("shr.u32", warp, tid, 5)
    return tid, lane, stride, warp


def vt_block_kernel(arch: str = "sm_90a", warps: int = 1) -> tuple[str, str]:
    """(name, PTX) of zyfa_vt_block(v_ptr, vt_ptr, v_stride, rounds): 32 ``warps`` threads a CTA;
    every warp of every CTA reads the block v (16 keys, rows v_stride bytes apart, 32 bytes each)
    into its own shared region and transposes it ``rounds`` times (a rate measurement: the same
    result each round); warp 0 of CTA 0 writes vt (32 x 16 bytes), the block in slot order."""
    name = f"zyfa_vt_block_w{warps}"
    prog = program()
    emit = prog.emit
    v_ptr, vt_ptr, addr, off = prog.regs("u64", 4)
    tid, lane, stride, warp = _emit_start(prog, v_ptr, vt_ptr)
    key, half, src, v_sh, vt_sh, at, rounds, r = prog.regs("u32", 8)
    emit("ld.param.u32", rounds, "rounds")
    emit("mov.u32", at, "zyfa_v")
    emit("mad.lo.u32", v_sh, warp, REGION, at)
    emit("add.u32", vt_sh, v_sh, KEYS * V_STRIDE)
    prog.comment("lane l copies bytes 16 (l % 2) .. + 15 of key l / 2")
    emit("shr.u32", key, lane, 1)
    emit("and.b32", half, lane, 1)
    emit("mul.lo.u32", half, half, 16)
    emit("mad.lo.u32", src, key, stride, half)
    emit("mul.wide.u32", off, src, 1)
    emit("add.u64", addr, v_ptr, off)
    words = prog.regs("u32", 4)
    emit("ld.global.v4.b32", *words, addr)
    emit("mad.lo.u32", at, key, V_STRIDE, v_sh)
    emit("add.u32", at, at, half)
    emit("st.shared.v4.b32", at, *words)
    emit("bar.warp.sync")
    more, first = prog.regs("pred", 2)
    emit("mov.u32", r, 0)
    prog.label("ROUND")
    emit_vt_transpose(prog, lane, v_sh, V_STRIDE, vt_sh, VT_ROW)
    emit("bar.warp.sync")
    emit("add.u32", r, r, 1)
    emit("setp.lt.u32", more, r, rounds)
    emit("bra", "ROUND", guard=more)
    prog.comment("warp 0 of CTA 0: lane d writes V^T row d")
    cta0 = prog.reg("pred")
    emit("mov.u32", at, "%ctaid.x")
    emit("setp.eq.u32", cta0, at, 0)
    emit("setp.lt.u32", first, tid, 32)
    emit("and.pred", first, first, cta0)
    emit("bra.div", "DONE", guard=f"!{first}")
    emit("mad.lo.u32", at, lane, VT_ROW, vt_sh)
    out = prog.regs("u32", 4)
    emit("ld.shared.v4.b32", *out, at)
    emit("mul.wide.u32", off, lane, VT_ROW)
    emit("add.u64", addr, vt_ptr, off)
    emit("st.global.v4.b32", addr, *out)
    prog.label("DONE")
    emit("ret")
    shared = [f".shared .align 128 .b8 zyfa_v[{warps * REGION}];"]
    params = [(".u64", "v_ptr"), (".u64", "vt_ptr"), (".u32", "v_stride"), (".u32", "rounds")]
    return name, module(name, params, prog, arch, shared)


@functools.cache
def _vt_block(arch: str, device: int, warps: int) -> Kernel:
    name, ptx = vt_block_kernel(arch, warps)
    return Kernel(assemble(ptx, arch).cubin, name, torch.device("cuda", device))


def vt_block(v: torch.Tensor, ctas: int = 1, warps: int = 1, rounds: int = 1) -> torch.Tensor:
    """V^T (32 x 16 uint8) of a (16, >= 32) uint8 block whose rows are 16-byte aligned, by the
    generated kernel: row d holds byte d of the keys in slot order. ``ctas`` x ``warps`` warps
    each transpose it ``rounds`` times (for a rate: 512 bytes a warp a round)."""
    if v.dtype != torch.uint8 or v.dim() != 2 or v.shape[0] != KEYS or v.shape[1] < BYTES or v.stride(1) != 1 \
            or v.stride(0) % 16 or v.data_ptr() % 16:
        raise ValueError(f"v must be a (16, >= 32) uint8 block with 16-byte aligned rows, got {tuple(v.shape)}")
    vt = torch.empty(BYTES, KEYS, dtype=torch.uint8, device=v.device)
    _vt_block("sm_90a", v.device.index or 0, warps)((ctas,), (32 * warps,), [
        ctypes.c_uint64(v.data_ptr()), ctypes.c_uint64(vt.data_ptr()), ctypes.c_uint32(v.stride(0)),
        ctypes.c_uint32(rounds)])
    return vt


TILE_THREADS = 128     # a warpgroup: warp w transposes head-dim bytes 32 w .. + 31


def vt_tile_kernel(keys: int, arch: str = "sm_90a") -> tuple[str, str]:
    """(name, PTX) of zyfa_vt_tile_k<keys>(v_ptr, vt_ptr, v_stride): one CTA of a warpgroup copies a
    key-major V tile (``keys`` rows of 128 bytes, v_stride bytes apart) into shared memory with the
    128-byte swizzle (as TMA lands it), zeroes the V^T tile, transposes with emit_vt_tile (warp w:
    group w) and writes the V^T tile (128 rows of 128 bytes) back unswizzled."""
    name = f"zyfa_vt_tile_k{keys}"
    prog = program()
    emit = prog.emit
    v_ptr, vt_ptr, addr, off = prog.regs("u64", 4)
    tid, lane, stride, warp = _emit_start(prog, v_ptr, vt_ptr)
    base, v_sh, vt_sh, at, row, piece = prog.regs("u32", 6)
    emit("mov.u32", base, "zyfa_tiles")
    emit("add.u32", base, base, 1023)
    emit("and.b32", v_sh, base, 0xFFFFFC00)                    # 1024-byte aligned, as the swizzle needs
    emit("add.u32", vt_sh, v_sh, ROW * ROW)
    words = prog.regs("u32", 4)

    def piece_of(i: int) -> None:
        """the thread's i-th piece: (row, piece) = divmod(tid + 128 i, 8)"""
        emit("add.u32", at, tid, TILE_THREADS * i)
        emit("shr.u32", row, at, 3)
        emit("and.b32", piece, at, 7)

    def swizzled(tile: Reg) -> None:                            # at = tile + row * 128 + 16 (piece ^ row % 8)
        emit("and.b32", at, row, 7)
        emit("xor.b32", at, at, piece)
        emit("shl.b32", at, at, 4)
        emit("mad.lo.u32", at, row, ROW, at)
        emit("add.u32", at, at, tile)

    prog.comment("V's pieces into shared memory, swizzled; V^T's tile zeroed")
    for i in range(keys * (ROW // 16) // TILE_THREADS):
        piece_of(i)
        emit("mul.lo.u32", at, row, stride)
        emit("mad.lo.u32", at, piece, 16, at)
        emit("mul.wide.u32", off, at, 1)
        emit("add.u64", addr, v_ptr, off)
        emit("ld.global.v4.b32", *words, addr)
        swizzled(v_sh)
        emit("st.shared.v4.b32", at, *words)
    zero = prog.reg("u32")
    emit("mov.u32", zero, 0)
    for i in range(ROW * (ROW // 16) // TILE_THREADS):
        emit("mad.lo.u32", at, tid, 16, vt_sh)
        emit("add.u32", at, at, TILE_THREADS * 16 * i)
        emit("st.shared.v4.b32", at, zero, zero, zero, zero)
    emit("bar.sync", 0)
    emit_vt_tile(prog, lane, warp, v_sh, vt_sh, keys)
    emit("bar.sync", 0)
    prog.comment("V^T's tile back, unswizzled")
    for i in range(ROW * (ROW // 16) // TILE_THREADS):
        piece_of(i)
        swizzled(vt_sh)
        emit("ld.shared.v4.b32", *words, at)
        emit("add.u32", at, tid, TILE_THREADS * i)
        emit("mul.wide.u32", off, at, 16)
        emit("add.u64", addr, vt_ptr, off)
        emit("st.global.v4.b32", addr, *words)
    emit("ret")
    shared = [f".shared .align 1024 .b8 zyfa_tiles[{2 * ROW * ROW + 1024}];"]
    params = [(".u64", "v_ptr"), (".u64", "vt_ptr"), (".u32", "v_stride")]
    return name, module(name, params, prog, arch, shared)


@functools.cache
def _vt_tile(arch: str, device: int, keys: int) -> Kernel:
    name, ptx = vt_tile_kernel(keys, arch)
    return Kernel(assemble(ptx, arch).cubin, name, torch.device("cuda", device))


def vt_tile(v: torch.Tensor) -> torch.Tensor:
    """V^T (128 x 128 uint8) of a key-major (keys, 128) uint8 tile (keys a multiple of 16 up to
    128, rows 16-byte aligned) by the generated kernel: row d holds byte d of the keys, each 16-key
    group in slot order, zeros past the keys."""
    keys = v.shape[0] if v.dim() == 2 else 0
    if v.dtype != torch.uint8 or v.dim() != 2 or v.shape[1] != ROW or keys % KEYS or not 0 < keys <= ROW \
            or v.stride(1) != 1 or v.stride(0) % 16 or v.data_ptr() % 16:
        raise ValueError(f"v must be a (16 k <= 128, 128) uint8 tile with 16-byte aligned rows, got {tuple(v.shape)}")
    vt = torch.empty(ROW, ROW, dtype=torch.uint8, device=v.device)
    _vt_tile("sm_90a", v.device.index or 0, keys)((1,), (TILE_THREADS,), [
        ctypes.c_uint64(v.data_ptr()), ctypes.c_uint64(vt.data_ptr()), ctypes.c_uint32(v.stride(0))])
    return vt
