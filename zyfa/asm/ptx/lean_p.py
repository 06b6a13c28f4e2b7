"""The lean P rules in generated PTX: FMA-pipe arithmetic and the magic-number trick only
(no MUFU exp2, no float-to-int conversion), bit-identical to ``zyfa.fp8.p_bits``.

``emit_p_code`` writes the instructions for one score into any program (the attention
kernel will call it per element); ``p_codes_kernel`` wraps it into a standalone kernel
that turns float32 y = t - r into packed E4M3 codes, four per 32-bit word with prmt.
"""
from __future__ import annotations

import struct

from ... import fp8 as F
from ...fp8 import HALF_RULES, LEAN_RULES
from ..program import Program, Reg
from .target import f32, module, program

PTX_RULES = LEAN_RULES + HALF_RULES      # the rules whose P bits the generated PTX matches exactly
PACK_HALF_PAIRS = "0x6420"               # prmt: bytes 0 and 2 of two half2 words: four codes


def emit_p_code(prog: Program, y: Reg, rule: str) -> Reg:
    """An f32 register whose low byte is the E4M3 code of 2^(y + 8) under ``rule``
    (its float value is MAGIC + code); the same operations, in the same order, as the spec."""
    if rule not in LEAN_RULES:
        raise ValueError(f"generated P rules are {LEAN_RULES}, got {rule!r}")
    yc = prog.reg("f32")
    prog.emit("max.f32", yc, y, f32(F.Y_FLOOR))             # bits >= 0 without a second clamp
    w = prog.reg("f32")
    if rule == "lean":
        prog.emit("fma.f32", w, yc, f32(8.0), f32(F.P_ONE_BITS + F.MAGIC))
        return w
    a, fl, f, slope = prog.regs("f32", 4)
    prog.emit("sub.f32", a, yc, f32(0.5))                   # floor(y) = rne(y - 0.5) via MAGIC
    prog.emit("add.f32", a, a, f32(F.MAGIC))
    prog.emit("sub.f32", fl, a, f32(F.MAGIC))
    prog.emit("sub.f32", f, yc, fl)                          # fraction in [0, 1]
    # the spec's slope already carries the mantissa's factor 8; scaling the cubic's
    # coefficients by 8 instead is exact (a power of two commutes with rounding)
    if rule == "lean_quad":
        prog.emit("fma.f32", slope, f, f32(8.0 * F.LEAN_QUAD_K), f32(8.0 * (1.0 - F.LEAN_QUAD_K)))
    else:
        inner = prog.reg("f32")
        prog.emit("fma.f32", inner, f, f32(8.0 * F.LEAN_CUBIC_B), f32(8.0 * (F.LEAN_CUBIC_A - F.LEAN_CUBIC_B)))
        prog.emit("fma.f32", slope, f, inner, f32(8.0 * (1.0 - F.LEAN_CUBIC_A)))
    # base = 8 floor(y) + 120 + MAGIC = 8 a + (120 - 7 MAGIC): exact either way, one FMA here
    base = prog.reg("f32")
    prog.emit("fma.f32", base, a, f32(8.0), f32(F.P_ONE_BITS - 7 * F.MAGIC))
    prog.emit("fma.f32", w, f, slope, base)
    return w


def _half2(x: float) -> str:
    """A b32 immediate holding x rounded to half precision in both halves."""
    bits = struct.unpack("<H", struct.pack("<e", F.round_f16_scalar(x)))[0]
    return f"0x{bits << 16 | bits:08x}"


def half_constants(prog: Program) -> dict:
    """The half2 constants of lean_cubic_f16 in registers (ptxas folds them into immediates)."""
    k = {}
    for name, value in (("floor", F.Y_FLOOR), ("half", 0.5), ("magic", F.F16_MAGIC), ("b", 8.0 * F.LEAN_CUBIC_B),
                        ("ab", 8.0 * (F.LEAN_CUBIC_A - F.LEAN_CUBIC_B)), ("a1", 8.0 * (1.0 - F.LEAN_CUBIC_A)),
                        ("eight", 8.0), ("base", F.P_ONE_BITS - 7 * F.F16_MAGIC)):
        k[name] = prog.reg("b32")
        prog.emit("mov.b32", k[name], _half2(value))
    return k


def emit_p_code_pair(prog: Program, y_lo: Reg, y_hi: Reg, k: dict) -> Reg:
    """A b32 register of two half-precision values 1536 + code: the E4M3 code of 2^(y + 8)
    for ``y_lo`` in byte 0 and for ``y_hi`` in byte 2, under lean_cubic_f16 (the only
    half-precision rule); the spec's operations on two scores an instruction. ``k``:
    ``half_constants``."""
    y, a, fl, f, inner, slope, base, w = prog.regs("b32", 8)
    prog.emit("cvt.f16x2.f32", y, y_hi, y_lo)
    prog.emit("max.f16x2", y, y, k["floor"])
    prog.emit("sub.f16x2", a, y, k["half"])                   # floor(y) = rne(y - 0.5) via the magic number
    prog.emit("add.f16x2", a, a, k["magic"])
    prog.emit("sub.f16x2", fl, a, k["magic"])
    prog.emit("sub.f16x2", f, y, fl)
    prog.emit("fma.f16x2", inner, f, k["b"], k["ab"])
    prog.emit("fma.f16x2", slope, f, inner, k["a1"])
    prog.emit("fma.f16x2", base, a, k["eight"], k["base"])    # 8 floor(y) + 120 + magic, exact
    prog.emit("fma.f16x2", w, f, slope, base)
    return w


def emit_p_exact_pair(prog: Program, y8_lo: Reg, y8_hi: Reg) -> Reg:
    """A b16 register holding the E4M3 codes of 2^y8 (y8 = y + 8, folded into the caller's
    FFMA) for ``y8_lo`` (low byte) and ``y8_hi``: the exact rule on MUFU.EX2 and the
    hardware's round-half-even conversion (subnormals and saturation included). It equals
    the spec's codes except where 2^y8 lies within MUFU's ~2 ulp of a rounding midpoint."""
    e_lo, e_hi = prog.regs("f32", 2)
    prog.emit("ex2.f32", e_lo, y8_lo)
    prog.emit("ex2.f32", e_hi, y8_hi)
    pair = prog.reg("b16")
    prog.emit("cvt.e4m3x2.f32", pair, e_hi, e_lo)
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
        k = half_constants(prog)
        packed = emit_pack_pairs(prog, emit_p_code_pair(prog, ys[0], ys[1], k),
                                 emit_p_code_pair(prog, ys[2], ys[3], k))
    else:
        codes = [emit_p_code(prog, y, rule) for y in ys]    # unrolled in Python
        packed = emit_pack4(prog, codes)
    prog.emit("mul.wide.u32", off, i, 4)
    prog.emit("add.u64", oaddr, op, off)
    prog.emit("st.global.b32", oaddr, packed)
    prog.label("EXIT")
    prog.emit("ret")
    return name, module(name, [(".u64", "y_ptr"), (".u64", "out_ptr"), (".u32", "n4")], prog, arch)
