"""The lean P rules in generated PTX, from the rules' step lists (zyfa.spec.rules): FMA-pipe
arithmetic and the magic-number trick only (no MUFU exp2, no float-to-int conversion), the
spec's operations in the spec's order, so the codes are bit-identical to ``p_bits``.

``emit_p_code`` writes the instructions for one score (float32 rules), ``emit_p_code_pair``
for two scores an instruction (half rules); ``p_codes_kernel`` wraps them into a standalone
kernel that turns float32 y = t - r into packed E4M3 codes, four per 32-bit word with prmt.
"""
from __future__ import annotations

import struct

from ...spec.rules import HALF_RULES, LEAN_RULES, P_RULE_TABLE, sums_unrounded
from ..program import Program, Reg
from .target import f32, module, program

PTX_RULES = LEAN_RULES + HALF_RULES      # the rules whose P bits the generated PTX matches exactly
# the rules whose P pairs become half2 A operands: the attention kernel takes their row sums
# from half-precision wgmmas (float32 accumulation, the ALUs' sums); the others' on the ALUs
HMMA_RULES = HALF_RULES + ("exact",)


def thread_row_sums(rule: str, running: bool) -> bool:
    """Whether each thread keeps its own part of the row sums: the fast mode's exact rule sums
    the exponentials before their rounding on the ALUs (spec.rules.sums_unrounded), no
    half-precision wgmma; the quad's parts are added after the last block."""
    return sums_unrounded(rule, "running" if running else "block")
PACK_HALF_PAIRS = "0x6420"               # prmt: bytes 0 and 2 of two half2 words: four codes
# a step's op in PTX, by precision
F32_OPS = {"max": "max.f32", "add": "add.f32", "sub": "sub.f32", "fma": "fma.f32"}
F16X2_OPS = {"max": "max.f16x2", "add": "add.f16x2", "sub": "sub.f16x2", "fma": "fma.f16x2"}


def _emit_steps(prog: Program, steps, env: dict, kind: str, ops: dict, constant) -> Reg:
    """Each step as one instruction; a value's register is allocated where it is first
    written. ``constant(c)``: the operand for a constant."""
    for step in steps:
        if step.out not in env:
            env[step.out] = prog.reg(kind)
        args = [env[a] if isinstance(a, str) else constant(a) for a in step.args]
        prog.emit(ops[step.op], env[step.out], *args)
    return env["w"]


def _steps(rule: str, family: tuple) -> tuple:
    """The steps of ``rule``, one of ``family`` (LEAN_RULES or HALF_RULES): any other rule is
    an error at generation time, naming it, rather than code for some other rule."""
    if rule not in family:
        raise ValueError(f"generated P rules are {family}, got {rule!r}")
    return P_RULE_TABLE[rule].steps


def emit_p_code(prog: Program, y: Reg, rule: str) -> Reg:
    """An f32 register whose low byte is the E4M3 code of 2^(y + 8) under ``rule``
    (its float value is MAGIC + code)."""
    return _emit_steps(prog, _steps(rule, LEAN_RULES), {"y": y}, "f32", F32_OPS, f32)


def _half2(x: float) -> str:
    """A b32 immediate holding x (a half value) in both halves."""
    bits = struct.unpack("<H", struct.pack("<e", x))[0]
    return f"0x{bits << 16 | bits:08x}"


def half_constants(prog: Program, rule: str) -> dict:
    """The half2 constants of a half rule's steps in registers, keyed by value, in the order
    the steps first use them (ptxas folds them into immediates)."""
    k = {}
    for step in _steps(rule, HALF_RULES):
        for a in step.args:
            if not isinstance(a, str) and a not in k:
                k[a] = prog.reg("b32")
                prog.emit("mov.b32", k[a], _half2(a))
    return k


def emit_p_code_pair(prog: Program, y_lo: Reg, y_hi: Reg, k: dict, rule: str) -> Reg:
    """A b32 register of two half-precision values 1536 + code: the E4M3 code of 2^(y + 8)
    for ``y_lo`` in byte 0 and for ``y_hi`` in byte 2, under a half rule: the spec's steps on
    two scores an instruction (the first, rounding y to half, packs the pair). ``k``:
    ``half_constants`` of the same rule."""
    steps = _steps(rule, HALF_RULES)
    assert steps[0].op == "round"
    y = prog.reg("b32")
    prog.emit("cvt.f16x2.f32", y, y_hi, y_lo)
    return _emit_steps(prog, steps[1:], {steps[0].out: y}, "b32", F16X2_OPS, k.__getitem__)


def emit_p_exact_pair(prog: Program, y8_lo: Reg, y8_hi: Reg, exps: list[Reg] | None = None) -> Reg:
    """A b16 register holding the E4M3 codes of 2^y8 (y8 = y + 8, folded into the caller's
    FFMA) for ``y8_lo`` (low byte) and ``y8_hi``: the exact rule on MUFU.EX2 and the
    hardware's round-half-even conversion (subnormals and saturation included). It equals
    the spec's codes except where 2^y8 lies within MUFU's ~2 ulp of a rounding midpoint.
    ``exps``: the two exponentials before rounding are appended to it."""
    e_lo, e_hi = prog.regs("f32", 2)
    prog.emit("ex2.f32", e_lo, y8_lo)
    prog.emit("ex2.f32", e_hi, y8_hi)
    pair = prog.reg("b16")
    prog.emit("cvt.e4m3x2.f32", pair, e_hi, e_lo)
    if exps is not None:
        exps += [e_lo, e_hi]
    return pair


def emit_pack_pairs(prog: Program, lo: Reg, hi: Reg) -> Reg:
    """Four codes in one word from two pair words (bytes 0, 2 of ``lo``, then of ``hi``)."""
    packed = prog.reg("b32")
    prog.emit("prmt.b32", packed, lo, hi, PACK_HALF_PAIRS)
    return packed


def emit_pack4(prog: Program, codes: list[Reg]) -> Reg:
    """The low bytes of four registers packed into one 32-bit word (byte i from codes[i])."""
    lo, hi, packed = prog.regs("b32", 3)
    prog.emit("prmt.b32", lo, codes[0], codes[1], "0x0040")
    prog.emit("prmt.b32", hi, codes[2], codes[3], "0x0040")
    prog.emit("prmt.b32", packed, lo, hi, "0x5410")
    return packed


def p_codes_kernel(rule: str, arch: str = "sm_90a") -> tuple[str, str]:
    """(kernel name, PTX): out[i] = E4M3 code of y[i]; one thread per 4 values; n4 = n / 4."""
    name = f"zyfa_p_codes_{rule}"
    prog = program()
    yp, op, off, addr, oaddr = prog.regs("u64", 5)
    n4, tid, cta, ntid, i = prog.regs("u32", 5)
    done = prog.reg("pred")
    prog.emit("ld.param.u64", yp, "y_ptr")
    prog.emit("ld.param.u64", op, "out_ptr")
    prog.emit("ld.param.u32", n4, "n4")
    prog.emit("mov.u32", tid, "%tid.x")
    prog.emit("mov.u32", cta, "%ctaid.x")
    prog.emit("mov.u32", ntid, "%ntid.x")
    prog.emit("mad.lo.u32", i, cta, ntid, tid)
    prog.emit("setp.ge.u32", done, i, n4)
    prog.emit("bra", "EXIT", guard=done)
    prog.emit("mul.wide.u32", off, i, 16)
    prog.emit("add.u64", addr, yp, off)
    ys = prog.regs("f32", 4)
    prog.emit("ld.global.v4.f32", *ys, addr)
    if rule in HALF_RULES:
        k = half_constants(prog, rule)
        packed = emit_pack_pairs(prog, emit_p_code_pair(prog, ys[0], ys[1], k, rule),
                                 emit_p_code_pair(prog, ys[2], ys[3], k, rule))
    else:
        codes = [emit_p_code(prog, y, rule) for y in ys]    # unrolled in Python
        packed = emit_pack4(prog, codes)
    prog.emit("mul.wide.u32", off, i, 4)
    prog.emit("add.u64", oaddr, op, off)
    prog.emit("st.global.b32", oaddr, packed)
    prog.label("EXIT")
    prog.emit("ret")
    return name, module(name, [(".u64", "y_ptr"), (".u64", "out_ptr"), (".u32", "n4")], prog, arch)
