"""gfx950 (MI355X, CDNA4) for zyfa's generators: the op table, register naming, the AMDHSA
kernel descriptor and code-object metadata, and assembly with Triton's bundled LLVM.

GFX9 encodings constrain operands, and the assembler enforces them: VOP2 (``_e32``) takes a
literal or SGPR only as its first source and a VGPR as its second; VOP3 forms take no
literals at all. So constants that are not inline (0.5, 1.0, 2.0, 4.0, their negatives,
integers -16..64) are written as the first source of a VOP2 op, as the K of
v_fmaak/v_fmamk, or put in an SGPR first.
"""
from __future__ import annotations

import os
import tempfile

from ..program import Program, Reg, Target

KINDS = ("s", "v", "a")

OPS = {
    # scalar
    "s_load_dword": "s_load_dword {0}, {1}, {2}",
    "s_load_dwordx2": "s_load_dwordx2 {0}, {1}, {2}",
    "s_load_dwordx4": "s_load_dwordx4 {0}, {1}, {2}",
    "s_load_dwordx8": "s_load_dwordx8 {0}, {1}, {2}",
    "s_mov_b32": "s_mov_b32 {0}, {1}",
    "s_add_u32": "s_add_u32 {0}, {1}, {2}",
    "s_addc_u32": "s_addc_u32 {0}, {1}, {2}",             # + the carry of the last s_add_u32
    "s_mul_hi_u32": "s_mul_hi_u32 {0}, {1}, {2}",
    "s_sub_u32": "s_sub_u32 {0}, {1}, {2}",
    "s_lshl_b32": "s_lshl_b32 {0}, {1}, {2}",
    "s_lshr_b32": "s_lshr_b32 {0}, {1}, {2}",
    "s_and_b32": "s_and_b32 {0}, {1}, {2}",
    "s_min_u32": "s_min_u32 {0}, {1}, {2}",
    "s_and_b64": "s_and_b64 {0}, {1}, {2}",
    "s_cmp_lt_u32": "s_cmp_lt_u32 {0}, {1}",
    "s_cmp_eq_u32": "s_cmp_eq_u32 {0}, {1}",
    "s_cmp_lg_u32": "s_cmp_lg_u32 {0}, {1}",
    "s_cbranch_scc0": "s_cbranch_scc0 {0}",
    "s_cbranch_scc1": "s_cbranch_scc1 {0}",
    "s_branch": "s_branch {0}",
    "s_mul_i32": "s_mul_i32 {0}, {1}, {2}",
    "s_setprio": "s_setprio {0}",                       # wave issue priority (ping-pong)
    "s_waitcnt_lgkm": "s_waitcnt lgkmcnt(0)",
    "s_waitcnt_vm": "s_waitcnt vmcnt(0)",
    "s_and_saveexec_b64": "s_and_saveexec_b64 {0}, {1}",
    "s_cbranch_execz": "s_cbranch_execz {0}",
    "s_endpgm": "s_endpgm",
    "s_barrier": "s_barrier",
    "s_mov_b64": "s_mov_b64 {0}, {1}",
    "ds_write_b128_at": "ds_write_b128 {0}, {1} offset:{2}",
    "ds_read_b128_at": "ds_read_b128 {0}, {1} offset:{2}",
    # vector integer
    "v_mov_b32": "v_mov_b32_e32 {0}, {1}",
    "v_accvgpr_read_b32": "v_accvgpr_read_b32 {0}, {1}",     # VGPR <- AGPR
    "v_accvgpr_write_b32": "v_accvgpr_write_b32 {0}, {1}",   # AGPR <- VGPR or inline constant
    "v_readfirstlane_b32": "v_readfirstlane_b32 {0}, {1}",
    "v_sub_u32": "v_sub_u32_e32 {0}, {1}, {2}",
    "v_max_i32": "v_max_i32_e32 {0}, {1}, {2}",
    "v_cvt_i32_f32": "v_cvt_i32_f32_e32 {0}, {1}",       # truncates, saturates, NaN -> 0
    "v_floor_f32": "v_floor_f32_e32 {0}, {1}",
    "v_lshl_add_u32": "v_lshl_add_u32 {0}, {1}, {2}, {3}",
    "v_lshlrev_b32": "v_lshlrev_b32_e32 {0}, {1}, {2}",
    "v_cmp_gt_u32": "v_cmp_gt_u32_e32 vcc, {0}, {1}",
    "v_cmp_gt_u32_vv": "v_cmp_gt_u32_e32 vcc, {0}, {1}",
    "v_cmp_gt_f32": "v_cmp_gt_f32_e32 vcc, {0}, {1}",
    "v_cmp_eq_u32": "v_cmp_eq_u32_e32 vcc, {0}, {1}",
    "v_cmp_neq_f32": "v_cmp_neq_f32_e32 vcc, {0}, {1}",
    "s_cbranch_vccz": "s_cbranch_vccz {0}",
    "v_max3_f32": "v_max3_f32 {0}, {1}, {2}, {3}",
    "v_cndmask_b32": "v_cndmask_b32_e32 {0}, {1}, {2}, vcc",   # vcc ? {2} : {1}
    "v_add_u32": "v_add_u32_e32 {0}, {1}, {2}",
    "v_min_u32": "v_min_u32_e32 {0}, {1}, {2}",
    "v_mad_u32_u24": "v_mad_u32_u24 {0}, {1}, {2}, {3}",
    "v_mul_lo_u32": "v_mul_lo_u32 {0}, {1}, {2}",
    "v_exp_f32": "v_exp_f32_e32 {0}, {1}",                 # 2^x
    "v_perm_b32": "v_perm_b32 {0}, {1}, {2}, {3}",
    "v_and_b32": "v_and_b32_e32 {0}, {1}, {2}",
    "v_xor_b32": "v_xor_b32_e32 {0}, {1}, {2}",
    "v_fmac_f32": "v_fmac_f32_e32 {0}, {1}, {2}",          # {0} += {1} * {2}
    "v_rcp_f32": "v_rcp_f32_e32 {0}, {1}",
    "v_log_f32": "v_log_f32_e32 {0}, {1}",                 # log2
    "ds_bpermute_b32": "ds_bpermute_b32 {0}, {1}, {2}",    # {0} <- {2} of lane {1} / 4
    "v_lshrrev_b32": "v_lshrrev_b32_e32 {0}, {1}, {2}",
    # packed FP32 (VOP3P): two values a register pair, IEEE per element; no literals
    "v_pk_fma_f32": "v_pk_fma_f32 {0}, {1}, {2}, {3}",
    "v_pk_add_f32": "v_pk_add_f32 {0}, {1}, {2}",
    "v_pk_mul_f32": "v_pk_mul_f32 {0}, {1}, {2}",
    # matrix cores: {0} D, {1} A, {2} B (register tuples), {3} C (a tuple or 0)
    "v_mfma_f32_32x32x64_f8f6f4": "v_mfma_f32_32x32x64_f8f6f4 {0}, {1}, {2}, {3}",
    # ... with E8M0 scales of A's rows / B's columns per 32 k from VGPRs {4}, {5}, byte 0 of each
    # (op_sel_hi is written out: VOP3P's default for it is all ones)
    "v_mfma_scale_f32_32x32x64_f8f6f4": "v_mfma_scale_f32_32x32x64_f8f6f4 {0}, {1}, {2}, {3}, {4}, {5} "
                                        "op_sel:[0,0,0] op_sel_hi:[0,0,0]",
    "s_nop": "s_nop {0}",
    # vector float32: the first source may be a literal (VOP2)
    "v_max_f32": "v_max_f32_e32 {0}, {1}, {2}",
    "v_add_f32": "v_add_f32_e32 {0}, {1}, {2}",
    "v_sub_f32": "v_sub_f32_e32 {0}, {1}, {2}",
    "v_mul_f32": "v_mul_f32_e32 {0}, {1}, {2}",
    "v_fmaak_f32": "v_fmaak_f32 {0}, {1}, {2}, {3}",     # {1} * {2} + literal {3}
    "v_fma_f32": "v_fma_f32 {0}, {1}, {2}, {3}",
    # memory: 32-bit VGPR offset from a 64-bit SGPR base
    "global_load_dwordx4": "global_load_dwordx4 {0}, {1}, {2}",
    "global_store_dword": "global_store_dword {0}, {1}, {2}",
    "global_load_dwordx4_at": "global_load_dwordx4 {0}, {1}, {2} offset:{3}",
    "global_store_dword_at": "global_store_dword {0}, {1}, {2} offset:{3}",
    "global_store_dwordx4_at": "global_store_dwordx4 {0}, {1}, {2} offset:{3}",
}


def span(regs: list[Reg]) -> str:
    """A register tuple, e.g. v[4:7] (the registers must be consecutive)."""
    kind, lo, hi = regs[0].kind, regs[0].index, regs[-1].index
    if [r.index for r in regs] != list(range(lo, hi + 1)):
        raise ValueError("a register tuple needs consecutive registers")
    return f"{kind}[{lo}:{hi}]"


def lit(x: float | int) -> str:
    """A 32-bit literal: a float's bits, or an int."""
    import struct
    if isinstance(x, float):
        return "0x%08x" % struct.unpack("<I", struct.pack("<f", x))[0]
    return "0x%08x" % (x & 0xFFFFFFFF)


TARGET = Target(ops=OPS, reg_name=lambda kind, i: f"{kind}{i}", declare=lambda kind, n: "", kinds=KINDS)


def program() -> Program:
    return Program(TARGET)


def module(name: str, prog: Program, args: list[tuple[str, int, int]], kernarg_size: int,
           abi: dict, workgroup_size: int, lds_bytes: int = 0) -> str:
    """A complete gfx950 code object source: the kernel, its descriptor and its metadata.

    args: (value kind: "global_buffer" | "by_value", offset, size) per kernel argument;
    abi: the .amdhsa_user_sgpr_* / system_* settings the kernel's prologue assumes."""
    counts = prog.register_counts()
    vgprs, sgprs, agprs = max(counts.get("v", 0), 1), max(counts.get("s", 0), 1), counts.get("a", 0)
    accum_offset = (vgprs + 3) // 4 * 4            # AGPRs follow the VGPRs in the unified file
    kd = {"group_segment_fixed_size": lds_bytes, "private_segment_fixed_size": 0, "kernarg_size": kernarg_size,
          **abi, "next_free_vgpr": accum_offset + agprs, "next_free_sgpr": sgprs, "accum_offset": accum_offset,
          "reserve_vcc": 1, "float_denorm_mode_32": 3, "float_denorm_mode_16_64": 3, "ieee_mode": 1,
          "dx10_clamp": 1}
    meta_args = "\n".join(
        f"      - .offset: {off}\n        .size: {size}\n        .value_kind: {kind}"
        + ("\n        .address_space: global" if kind == "global_buffer" else "")
        for kind, off, size in args)
    return "\n".join([
        '\t.amdgcn_target "amdgcn-amd-amdhsa--gfx950"',
        "\t.amdhsa_code_object_version 5",
        "\t.text",
        f"\t.globl {name}",
        "\t.p2align 8",
        f"\t.type {name},@function",
        f"{name}:",
        *prog.body,
        f".Lfunc_end_{name}:",
        f"\t.size {name}, .Lfunc_end_{name}-{name}",
        "",
        "\t.rodata",
        "\t.p2align 6",
        f"\t.amdhsa_kernel {name}",
        *[f"\t\t.amdhsa_{k} {v}" for k, v in kd.items()],
        "\t.end_amdhsa_kernel",
        "",
        "\t.amdgpu_metadata",
        "---",
        "amdhsa.kernels:",
        f"  - .name: {name}",
        f"    .symbol: {name}.kd",
        f"    .kernarg_segment_size: {kernarg_size}",
        "    .kernarg_segment_align: 8",
        f"    .group_segment_fixed_size: {lds_bytes}",
        "    .private_segment_fixed_size: 0",
        f"    .max_flat_workgroup_size: {workgroup_size}",
        "    .wavefront_size: 64",
        f"    .sgpr_count: {sgprs + 6}",
        f"    .vgpr_count: {accum_offset + agprs}",
        f"    .agpr_count: {agprs}",
        "    .args:",
        meta_args,
        "amdhsa.target: amdgcn-amd-amdhsa--gfx950",
        "amdhsa.version:",
        "  - 1",
        "  - 2",
        "...",
        "\t.end_amdgpu_metadata",
        ""])


def assemble(text: str, arch: str = "gfx950") -> bytes:
    """Assemble with Triton's bundled LLVM and link into an hsaco (bytes); raises with the
    assembler's message on bad input."""
    from triton._C.libtriton import amd, llvm
    llvm.init_targets()
    with tempfile.TemporaryFile() as err:            # LLVM reports on file descriptor 2
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        try:
            obj = amd.assemble_amdgcn(text, arch, "")
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        messages = err.read().decode(errors="replace")
    if not obj:
        raise RuntimeError(f"the AMDGPU assembler rejected the code:\n{messages}")
    with tempfile.TemporaryDirectory() as d:
        src, out = os.path.join(d, "k.o"), os.path.join(d, "k.hsaco")
        with open(src, "wb") as f:
            f.write(obj)
        amd.link_hsaco(src, out)
        with open(out, "rb") as f:
            return f.read()
