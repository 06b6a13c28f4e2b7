"""The lean P rules in generated gfx950 assembly, from the rules' step lists (zyfa.spec.rules):
packed FP32 arithmetic (two scores an instruction) and the magic-number trick (no v_exp_f32,
no float-to-int conversion), the spec's operations in the spec's order, so the codes are
bit-identical to ``p_bits``.

``p_codes_kernel`` wraps them into a standalone kernel (one thread per four values, codes
packed four to a dword with v_perm_b32), which CI assembles and runs in the emulator.
"""
from __future__ import annotations

import dataclasses

from ...spec.constants import MAGIC, P_ONE_BITS
from ...spec.rules import LEAN_RULES, P_RULE_TABLE
from ..program import Program, Reg
from .target import lit, module, program, span

WORKGROUP = 256
PACK_PAIR = 0x0C0C0400      # v_perm: byte 0 of src1, byte 0 of src0, zeros
PACK_HALVES = 0x05040100    # v_perm: bytes 0-1 of src1, then bytes 0-1 of src0
# the constants every floor-based rule shares, loaded first (the rule's own follow in step order)
SHARED_CONSTANTS = (8.0, -0.5, MAGIC, -MAGIC, -1.0, P_ONE_BITS - 7 * MAGIC)
# the six scratch pairs of emit_p_codes, by value name; ``inner`` takes ``fl``'s pair (dead by then)
SCRATCH = {"yc": 0, "a": 1, "fl": 2, "f": 3, "slope": 4, "base": 5, "inner": 2}


@dataclasses.dataclass
class Constants:
    """VGPR pairs keyed by value, each value twice: packed FP32 instructions take no literals."""
    pairs: dict


def _steps(rule: str) -> tuple:
    """The steps of a float32 lean rule; any other rule is an error at generation time, naming
    it, rather than code for some other rule."""
    if rule not in LEAN_RULES:
        raise ValueError(f"generated P rules are {LEAN_RULES}, got {rule!r}")
    return P_RULE_TABLE[rule].steps


def constant_values(rule: str) -> list:
    """The pair constants the rule's steps read: a constant c subtracted is added as -c, a
    value subtracted is an FMA by -1; max takes its constant as a literal."""
    needed = []
    for step in _steps(rule):
        for c in _pair_constants(step):
            if c not in needed:
                needed.append(c)
    return [c for c in SHARED_CONSTANTS if c in needed] + [c for c in needed if c not in SHARED_CONSTANTS]


def _pair_constants(step) -> list:
    """The constants a step reads from VGPR pairs in its gfx950 spelling (emit_p_codes)."""
    if step.op == "max":
        return []                                   # a literal operand
    if step.op == "sub":
        x, y = step.args
        return [-1.0] if isinstance(y, str) else [-y]   # fma(y, -1, x), or x + (-y)
    return [a for a in step.args if not isinstance(a, str)]


def load_constants(prog: Program, rule: str) -> Constants:
    pairs = {}
    for value in constant_values(rule):
        pair = prog.aligned("v", 2, 2)
        for reg in pair:
            prog.emit("v_mov_b32", reg, lit(value))
        pairs[value] = pair
    return Constants(pairs)


def emit_p_codes(prog: Program, y: list[Reg], rule: str, c: Constants, out: list[Reg] | None = None,
                 scratch: list[list[Reg]] | None = None) -> list[Reg]:
    """A VGPR pair whose low bytes are the E4M3 codes of 2^(y + 8) for the two values of the
    pair ``y`` (float values MAGIC + code), two scores an instruction with packed FP32 (the
    same IEEE operations per element as the spec: a subtraction as an exact FMA by -1 or the
    addition of the negated constant).

    gfx950's registers are physical: a kernel that makes many codes passes ``out`` and six
    ``scratch`` pairs to reuse (y may be one of them: it is read first)."""
    steps = _steps(rule)
    scratch = scratch if scratch is not None else [prog.aligned("v", 2, 2) for _ in range(6)]
    env = {"y": y, "w": out if out is not None else prog.aligned("v", 2, 2)}
    k = {value: span(pair) for value, pair in c.pairs.items()}

    def operand(a):
        return k[a] if not isinstance(a, str) else span(env[a])

    for step in steps:
        if step.out not in env:
            env[step.out] = scratch[SCRATCH[step.out]]
        d = env[step.out]
        x = step.args
        if step.op == "max":                                     # no packed max: one a score
            for i in (0, 1):
                prog.emit("v_max_f32", d[i], lit(x[1]), env[x[0]][i])
        elif step.op == "add":
            prog.emit("v_pk_add_f32", span(d), operand(x[0]), operand(x[1]))
        elif step.op == "sub" and not isinstance(x[1], str):
            prog.emit("v_pk_add_f32", span(d), operand(x[0]), k[-x[1]])
        elif step.op == "sub":                                   # x0 - x1 = fma(x1, -1, x0), one rounding
            prog.emit("v_pk_fma_f32", span(d), operand(x[1]), k[-1.0], operand(x[0]))
        else:
            prog.emit("v_pk_fma_f32", span(d), *map(operand, x))
    return env["w"]


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
