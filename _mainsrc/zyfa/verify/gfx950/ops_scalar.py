"""Scalar instructions of the emulator: SALU arithmetic, compares and moves, scalar memory loads,
branches, and the no-ops that only matter to timing (s_waitcnt's check is in ``waits``)."""
from __future__ import annotations

import numpy as np

from .core import OPS, U32, op


@op("s_waitcnt", "s_nop", "s_setprio", "s_sleep")
def _nop(w, i):
    pass


@op("s_load_dword", "s_load_dwordx2", "s_load_dwordx4", "s_load_dwordx8", "s_load_dwordx16")
def _s_load(w, i):
    n = {"s_load_dword": 1}.get(i.op, int(i.op.rsplit("x", 1)[-1]) if "x" in i.op.rsplit("_", 1)[-1] else 1)
    base = w.sval(i.args[1], 64) + (w.sval(i.args[2]) if len(i.args) > 2 else 0)
    words = w.mem.read(np.array([base]), 4 * n).view(U32).reshape(-1)
    w.set_s(i.args[0], sum(int(x) << (32 * j) for j, x in enumerate(words)))


@op("s_branch")
def _s_branch(w, i):
    w.jump(i.args[0])


@op("s_cbranch_execz", "s_cbranch_execnz", "s_cbranch_scc0", "s_cbranch_scc1", "s_cbranch_vccz", "s_cbranch_vccnz")
def _s_cbranch(w, i):
    cond = {"execz": w.exec == 0, "execnz": w.exec != 0, "scc0": w.scc == 0, "scc1": w.scc == 1,
            "vccz": w.vcc == 0, "vccnz": w.vcc != 0}[i.op.rsplit("_", 1)[1]]
    if cond:
        w.jump(i.args[0])


def _sop2(fn, bits=32, sets_scc=None):
    def run(w, i):
        a, b = w.sval(i.args[1], bits), w.sval(i.args[2], bits)
        r = fn(a, b, w) & ((1 << bits) - 1)
        w.set_s(i.args[0], r)
        if sets_scc is not None:
            w.scc = int(sets_scc(a, b, r, w))
    return run


def _signed(x, bits=32):
    return x - (1 << bits) if x >> (bits - 1) else x


OPS.update({
    "s_mov_b32": lambda w, i: w.set_s(i.args[0], w.sval(i.args[1])),
    "s_movk_i32": lambda w, i: w.set_s(i.args[0], _signed(w.sval(i.args[1]) & 0xFFFF, 16) & 0xFFFFFFFF),
    "s_mov_b64": lambda w, i: w.set_s(i.args[0], w.sval(i.args[1], 64)),
    "s_add_u32": _sop2(lambda a, b, w: a + b, sets_scc=lambda a, b, r, w: a + b > 0xFFFFFFFF),
    "s_addc_u32": _sop2(lambda a, b, w: a + b + w.scc, sets_scc=lambda a, b, r, w: a + b + w.scc > 0xFFFFFFFF),
    "s_add_i32": _sop2(lambda a, b, w: a + b),
    "s_sub_u32": _sop2(lambda a, b, w: a - b, sets_scc=lambda a, b, r, w: b > a),
    "s_sub_i32": _sop2(lambda a, b, w: a - b),
    "s_mul_i32": _sop2(lambda a, b, w: _signed(a) * _signed(b)),
    "s_min_u32": _sop2(lambda a, b, w: min(a, b), sets_scc=lambda a, b, r, w: a < b),
    "s_lshl_b32": _sop2(lambda a, b, w: a << (b & 31), sets_scc=lambda a, b, r, w: r != 0),
    "s_ashr_i32": _sop2(lambda a, b, w: _signed(a) >> (b & 31), sets_scc=lambda a, b, r, w: r != 0),
    "s_lshr_b32": _sop2(lambda a, b, w: a >> (b & 31), sets_scc=lambda a, b, r, w: r != 0),
    "s_and_b32": _sop2(lambda a, b, w: a & b, sets_scc=lambda a, b, r, w: r != 0),
    "s_or_b32": _sop2(lambda a, b, w: a | b, sets_scc=lambda a, b, r, w: r != 0),
    "s_and_b64": _sop2(lambda a, b, w: a & b, 64, sets_scc=lambda a, b, r, w: r != 0),
    "s_or_b64": _sop2(lambda a, b, w: a | b, 64, sets_scc=lambda a, b, r, w: r != 0),
    "s_andn2_b64": _sop2(lambda a, b, w: a & ~b, 64, sets_scc=lambda a, b, r, w: r != 0),
    "s_xor_b64": _sop2(lambda a, b, w: a ^ b, 64, sets_scc=lambda a, b, r, w: r != 0),
})


def _scmp(fn, signed=False):
    def run(w, i):
        a, b = w.sval(i.args[0]), w.sval(i.args[1])
        if signed:
            a, b = _signed(a), _signed(b)
        w.scc = int(fn(a, b))
    return run


for _name, _fn in {"eq": lambda a, b: a == b, "lg": lambda a, b: a != b, "lt": lambda a, b: a < b,
                   "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}.items():
    OPS[f"s_cmp_{_name}_u32"] = _scmp(_fn)
    OPS[f"s_cmp_{_name}_i32"] = _scmp(_fn, signed=True)


@op("s_and_saveexec_b64")
def _s_and_saveexec(w, i):
    old = w.exec
    w.set_s(i.args[0], old)
    w.exec = w.sval(i.args[1], 64) & old
    w.scc = int(w.exec != 0)



# ---- what Triton's gfx950 attention kernel adds
OPS.update({
    "s_xor_b32": _sop2(lambda a, b, w: a ^ b, sets_scc=lambda a, b, r, w: r != 0),
    "s_andn2_b32": _sop2(lambda a, b, w: a & ~b, sets_scc=lambda a, b, r, w: r != 0),
    "s_min_i32": _sop2(lambda a, b, w: min(_signed(a), _signed(b)), sets_scc=lambda a, b, r, w: _signed(a) < _signed(b)),
    "s_max_i32": _sop2(lambda a, b, w: max(_signed(a), _signed(b)), sets_scc=lambda a, b, r, w: _signed(a) > _signed(b)),
    "s_mul_hi_u32": _sop2(lambda a, b, w: (a * b) >> 32),
    "s_lshl_b64": lambda w, i: _s_shift64(w, i),
    "s_cselect_b32": lambda w, i: w.set_s(i.args[0], w.sval(i.args[1]) if w.scc else w.sval(i.args[2])),
    "s_cselect_b64": lambda w, i: w.set_s(i.args[0], w.sval(i.args[1], 64) if w.scc else w.sval(i.args[2], 64)),
})


def _s_shift64(w, i):
    r = (w.sval(i.args[1], 64) << (w.sval(i.args[2]) & 63)) & 0xFFFFFFFFFFFFFFFF
    w.set_s(i.args[0], r)
    w.scc = int(r != 0)


@op("s_not_b32")
def _s_not(w, i):
    r = ~w.sval(i.args[1]) & 0xFFFFFFFF
    w.set_s(i.args[0], r)
    w.scc = int(r != 0)


@op("s_abs_i32")
def _s_abs(w, i):
    r = abs(_signed(w.sval(i.args[1]))) & 0xFFFFFFFF
    w.set_s(i.args[0], r)
    w.scc = int(r != 0)


@op("s_bitcmp1_b32", "s_bitcmp0_b32")
def _s_bitcmp(w, i):
    bit = (w.sval(i.args[0]) >> (w.sval(i.args[1]) & 31)) & 1
    w.scc = int(bit == (1 if i.op.endswith("1_b32") else 0))
