"""A building block of the gfx950 attention kernel: one 32 x 32 tile of S = Q K^T in FP8 with
a single ``v_mfma_f32_32x32x64_f8f6f4`` (head-dim slice of 64), one wave.

Each lane loads its operand bytes straight from global memory in the MFMA's layout (byte j
of lane l: row l % 32, k = 32 (j // 16) + 16 (l // 32) + j % 16, the layout Triton's compiled
code arranges; see the emulator), and stores the f32 result by the accumulator layout
(register r: row 8 (r // 4) + 4 (l // 32) + r % 4, column l % 32). Checked in the emulator
against float64; not run on hardware.
"""
from __future__ import annotations

from ...asm.gfx950.target import module, program, span

ROWS, K = 32, 64
# wait states between an MFMA 32x32 (16 passes) and a VALU/VMEM read of its result, as LLVM's
# hazard recognizer writes them after this instruction (s_nop 15; s_nop 1 in Triton's code)
MFMA_32X32_READ_NOPS = (15, 1)


def qk_tile_kernel() -> tuple[str, str]:
    """(name, assembly) of zyfa_qk_tile_gfx950(q_ptr, k_ptr, s_ptr): q, k (32 x 64, E4M3,
    row-major), s (32 x 32 float32, row-major) = q . k^T; 64 threads."""
    name = "zyfa_qk_tile_gfx950"
    prog = program()
    emit = prog.emit
    kernarg = prog.aligned("s", 2)
    prog.regs("s", 1)                                   # s2: workgroup id (one workgroup)
    ptrs = prog.aligned("s", 4, 4)                      # q_ptr, k_ptr
    s_ptr = prog.aligned("s", 2)
    (tid,) = prog.regs("v", 1)
    emit("s_load_dwordx4", span(ptrs), span(kernarg), 0)
    emit("s_load_dwordx2", span(s_ptr), span(kernarg), 16)
    row, half, t, off, out = prog.regs("v", 5)
    emit("v_and_b32", row, 31, tid)
    emit("v_lshrrev_b32", half, 5, tid)
    emit("v_lshlrev_b32", t, 4, half)
    emit("v_lshl_add_u32", off, row, 6, t)              # row * 64 + 16 * half
    emit("s_waitcnt_lgkm")
    a = prog.aligned("v", 8, 2)
    b = prog.aligned("v", 8, 2)
    for regs, base in ((a, ptrs[:2]), (b, ptrs[2:])):  # B = K^T: lane l % 32 is the key
        emit("global_load_dwordx4_at", span(regs[:4]), off, span(base), 0)
        emit("global_load_dwordx4_at", span(regs[4:]), off, span(base), 32)
    emit("s_waitcnt_vm")
    d = prog.aligned("v", 16, 2)
    emit("v_mfma_f32_32x32x64_f8f6f4", span(d), span(a), span(b), 0)
    emit("v_lshlrev_b32", t, 9, half)                   # 4 rows of 128 bytes per half
    emit("v_lshl_add_u32", out, row, 2, t)              # + 4 * column
    for nops in MFMA_32X32_READ_NOPS:
        emit("s_nop", nops)
    for r, reg in enumerate(d):
        emit("global_store_dword_at", out, reg, span(s_ptr), (8 * (r // 4) + r % 4) * ROWS * 4)
    emit("s_endpgm")
    abi = {"user_sgpr_count": 2, "user_sgpr_kernarg_segment_ptr": 1, "system_sgpr_workgroup_id_x": 1,
           "system_vgpr_workitem_id": 0}
    args = [("global_buffer", 0, 8), ("global_buffer", 8, 8), ("global_buffer", 16, 8)]
    return name, module(name, prog, args, kernarg_size=24, abi=abi, workgroup_size=64)
