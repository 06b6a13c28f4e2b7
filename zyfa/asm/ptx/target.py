"""PTX for sm_90a: the op table and register kinds of zyfa's generators.

Float adds and multiplies carry an explicit ``.rn``: without a rounding modifier ptxas may
contract a multiply and an add into one FMA, which would change the bits the spec fixes.
"""
from __future__ import annotations

import struct

from ..program import Program, Target

# register kind -> PTX type; names are %<kind>_<n>, e.g. %f32_3, %b32_0, %pred_1
KINDS = {"f32": ".f32", "b32": ".b32", "u32": ".u32", "u64": ".u64", "pred": ".pred"}

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
    "add.f32": "add.rn.f32 {0}, {1}, {2};",
    "sub.f32": "sub.rn.f32 {0}, {1}, {2};",
    "mul.f32": "mul.rn.f32 {0}, {1}, {2};",
    "fma.f32": "fma.rn.f32 {0}, {1}, {2}, {3};",
    "max.f32": "max.f32 {0}, {1}, {2};",
    "prmt.b32": "prmt.b32 {0}, {1}, {2}, {3};",
}


def f32(x: float) -> str:
    """A float32 immediate, bit-exact (PTX's 0fXXXXXXXX form)."""
    return "0f%08X" % struct.unpack("<I", struct.pack("<f", x))[0]


TARGET = Target(ops=OPS, reg_name=lambda kind, i: f"%{kind}_{i}",
                declare=lambda kind, n: f"\t.reg {KINDS[kind]} %{kind}_<{n}>;", kinds=tuple(KINDS))


def program() -> Program:
    return Program(TARGET)


def module(name: str, params: list[tuple[str, str]], prog: Program, arch: str = "sm_90a") -> str:
    """A PTX module holding one kernel; ``params`` are (PTX type, name) pairs."""
    plist = ",\n".join(f"\t.param {t} {n}" for t, n in params)
    return "\n".join([".version 8.0", f".target {arch}", ".address_size 64", "",
                      f".visible .entry {name}(\n{plist}\n)", "{", *prog.declarations(), *prog.body, "}", ""])
