"""The lean P rules in generated gfx950 assembly, bit-identical to ``zyfa.fp8.p_bits``: packed
FP32 arithmetic (two scores an instruction) and the magic-number trick (no v_exp_f32, no
float-to-int conversion), the same operations in the same order as the spec and the PTX
emitter (zyfa.asm.ptx.lean_p).

``p_codes_kernel`` wraps them into a standalone kernel (one thread per four values, codes
packed four to a dword with v_perm_b32), which CI assembles and runs in the emulator.
"""
from __future__ import annotations

import dataclasses

from ... import fp8 as F
from ...fp8 import LEAN_RULES
from ..program import Program, Reg
from .target import lit, module, program, span

WORKGROUP = 256
PACK_PAIR = 0x0C0C0400      # v_perm: byte 0 of src1, byte 0 of src0, zeros
PACK_HALVES = 0x05040100    # v_perm: bytes 0-1 of src1, then bytes 0-1 of src0


@dataclasses.dataclass
class Constants:
    """VGPR pairs, each value twice: packed FP32 instructions take no literals."""
    pairs: dict


def constant_values(rule: str) -> dict:
    values = {"eight": 8.0}
    if rule == "lean":
        return {**values, "one_magic": F.P_ONE_BITS + F.MAGIC}
    values.update(neg_half=-0.5, magic=F.MAGIC, neg_magic=-F.MAGIC, minus_one=-1.0,
                  base=F.P_ONE_BITS - 7 * F.MAGIC)          # 8 floor(y) + 120 + MAGIC = 8 a + base
    if rule == "lean_quad":
        return {**values, "k": 8.0 * F.LEAN_QUAD_K, "k_rest": 8.0 * (1.0 - F.LEAN_QUAD_K)}
    # the cubic's coefficients carry the mantissa's factor 8 (exact, as in the PTX emitter)
    return {**values, "b": 8.0 * F.LEAN_CUBIC_B, "ab": 8.0 * (F.LEAN_CUBIC_A - F.LEAN_CUBIC_B),
            "a": 8.0 * (1.0 - F.LEAN_CUBIC_A)}


def load_constants(prog: Program, rule: str) -> Constants:
    pairs = {}
    for name, value in constant_values(rule).items():
        pair = prog.aligned("v", 2, 2)
        for reg in pair:
            prog.emit("v_mov_b32", reg, lit(value))
        pairs[name] = pair
    return Constants(pairs)


def emit_p_codes(prog: Program, y: list[Reg], rule: str, c: Constants, out: list[Reg] | None = None,
                 scratch: list[list[Reg]] | None = None) -> list[Reg]:
    """A VGPR pair whose low bytes are the E4M3 codes of 2^(y + 8) for the two values of the
    pair ``y`` (float values MAGIC + code), two scores an instruction with packed FP32 (the
    same IEEE operations per element as the spec: the subtraction as an exact FMA by -1).

    gfx950's registers are physical: a kernel that makes many codes passes ``out`` and six
    ``scratch`` pairs to reuse (y may be one of them: it is read first)."""
    if rule not in LEAN_RULES:
        raise ValueError(f"generated P rules are {LEAN_RULES}, got {rule!r}")
    yc, a, fl, f, slope, base = scratch if scratch is not None else [prog.aligned("v", 2, 2) for _ in range(6)]
    w = out if out is not None else prog.aligned("v", 2, 2)
    k = {name: span(pair) for name, pair in c.pairs.items()}
    for i in (0, 1):                                              # no packed max: one a score
        prog.emit("v_max_f32", yc[i], lit(F.Y_FLOOR), y[i])
    pk_fma = lambda d, x, y_, z: prog.emit("v_pk_fma_f32", span(d), x if isinstance(x, str) else span(x),  # noqa: E731
                                          y_ if isinstance(y_, str) else span(y_), z if isinstance(z, str) else span(z))
    if rule == "lean":
        pk_fma(w, yc, k["eight"], k["one_magic"])
        return w
    prog.emit("v_pk_add_f32", span(a), span(yc), k["neg_half"])    # floor(y) = rne(y - 0.5) via MAGIC
    prog.emit("v_pk_add_f32", span(a), span(a), k["magic"])
    prog.emit("v_pk_add_f32", span(fl), span(a), k["neg_magic"])
    pk_fma(f, fl, k["minus_one"], yc)                             # f = y - floor(y), one rounding
    if rule == "lean_quad":
        pk_fma(slope, f, k["k"], k["k_rest"])
    else:
        pk_fma(fl, f, k["b"], k["ab"])                            # fl is done: reuse it for the inner term
        pk_fma(slope, f, fl, k["a"])
    pk_fma(base, a, k["eight"], k["base"])
    pk_fma(w, f, slope, base)
    return w


def emit_pack4(prog: Program, codes: list[Reg], sel_pair: Reg, sel_halves: Reg) -> Reg:
    lo, hi, packed = prog.regs("v", 3)
    prog.emit("v_perm_b32", lo, codes[1], codes[0], sel_pair)
    prog.emit("v_perm_b32", hi, codes[3], codes[2], sel_pair)
    prog.emit("v_perm_b32", packed, hi, lo, sel_halves)
    return packed


def p_codes_kernel(rule: str) -> tuple[str, str]:
    """(name, assembly) of zyfa_p_codes_<rule>(y_ptr, out_ptr, n4): 256 threads a workgroup,
    out[i] (a dword) = the four E4M3 codes of y[4i .. 4i+3]."""
    name = f"zyfa_p_codes_{rule}"
    prog = program()
    kernarg = prog.aligned("s", 2)                      # s[0:1]: the ABI's kernarg pointer
    (wg,) = prog.regs("s", 1)                           # s2: workgroup id x
    ptrs = prog.aligned("s", 4, 4)                      # y_ptr, out_ptr
    (n4,) = prog.regs("s", 1)
    saved = prog.aligned("s", 2)
    (tid,) = prog.regs("v", 1)                          # v0: work-item id
    emit = prog.emit
    emit("s_load_dwordx4", span(ptrs), span(kernarg), 0)
    emit("s_load_dword", n4, span(kernarg), 16)
    c = load_constants(prog, rule)
    sel_pair, sel_halves = prog.regs("s", 2)
    emit("s_mov_b32", sel_pair, lit(PACK_PAIR))
    emit("s_mov_b32", sel_halves, lit(PACK_HALVES))
    gid, off = prog.regs("v", 2)
    emit("v_lshl_add_u32", gid, wg, 8, tid)             # workgroup * 256 + thread
    emit("s_waitcnt_lgkm")
    emit("v_cmp_gt_u32", n4, gid)
    emit("s_and_saveexec_b64", span(saved), "vcc")
    emit("s_cbranch_execz", ".Lend")
    emit("v_lshlrev_b32", off, 4, gid)
    ys = prog.aligned("v", 4, 4)
    emit("global_load_dwordx4", span(ys), off, span(ptrs[:2]))
    emit("s_waitcnt_vm")
    codes = emit_p_codes(prog, ys[:2], rule, c) + emit_p_codes(prog, ys[2:], rule, c)
    packed = emit_pack4(prog, codes, sel_pair, sel_halves)
    emit("v_lshlrev_b32", off, 2, gid)
    emit("global_store_dword", off, packed, span(ptrs[2:]))
    prog.label(".Lend")
    emit("s_endpgm")
    abi = {"user_sgpr_count": 2, "user_sgpr_kernarg_segment_ptr": 1, "system_sgpr_workgroup_id_x": 1,
           "system_vgpr_workitem_id": 0}
    args = [("global_buffer", 0, 8), ("global_buffer", 8, 8), ("by_value", 16, 4)]
    return name, module(name, prog, args, kernarg_size=24, abi=abi, workgroup_size=WORKGROUP)
