"""Instruction semantics of zyfa's gfx950 emulator: one handler per opcode (or family),
registered into ``emulator.OPS``. Each reads its operands through the ``Wave`` and writes
its results respecting the exec mask, as the hardware does; where documentation and
Triton's compiled code disagree, Triton's code was the judge (see the MFMA layout).
"""
from __future__ import annotations

import numpy as np

from .emulator import F32, F64, I32, LANES, OPS, U32, U64, WAVE, _REG, _f, _literal, _u, fma_f32, lanes_of




def op(*names):
    def deco(fn):
        for n in names:
            OPS[n] = fn
        return fn
    return deco


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


# ---- VALU
def _vop(fn, float_op=False):
    def run(w, i):
        srcs = [w.vsrc(t, float_op) for t in i.args[1:]]
        w.set_v(i.args[0], fn(*srcs))
    return run


def _fop(fn):
    """A float32 operation on uint32 lanes."""
    return _vop(lambda *xs: _u(fn(*[_f(x) for x in xs])), float_op=True)


def _i(x):
    return x.view(I32)


OPS.update({
    "v_mov_b32": _vop(lambda a: a),
    "v_accvgpr_read_b32": _vop(lambda a: a),
    "v_accvgpr_write_b32": _vop(lambda a: a),
    "v_add_u32": _vop(lambda a, b: a + b),
    "v_sub_u32": _vop(lambda a, b: a - b),
    "v_subrev_u32": _vop(lambda a, b: b - a),
    "v_mul_lo_u32": _vop(lambda a, b: (a.astype(U64) * b.astype(U64)).astype(U32)),
    "v_mad_u32_u24": _vop(lambda a, b, c: ((a & U32(0xFFFFFF)).astype(U64) * (b & U32(0xFFFFFF)) + c).astype(U32)),
    "v_min_u32": _vop(lambda a, b: np.minimum(a, b)),
    "v_max_i32": _vop(lambda a, b: np.maximum(_i(a), _i(b)).view(U32)),
    "v_min_i32": _vop(lambda a, b: np.minimum(_i(a), _i(b)).view(U32)),
    "v_max_u32": _vop(lambda a, b: np.maximum(a, b)),
    "v_and_b32": _vop(lambda a, b: a & b),
    "v_or_b32": _vop(lambda a, b: a | b),
    "v_xor_b32": _vop(lambda a, b: a ^ b),
    "v_lshlrev_b32": _vop(lambda s, a: a << (s & U32(31))),
    "v_lshrrev_b32": _vop(lambda s, a: a >> (s & U32(31))),
    "v_ashrrev_i32": _vop(lambda s, a: (_i(a) >> _i(s & U32(31))).view(U32)),
    "v_lshl_or_b32": _vop(lambda a, s, c: (a << (s & U32(31))) | c),
    "v_lshl_add_u32": _vop(lambda a, s, c: (a << (s & U32(31))) + c),
    "v_add_lshl_u32": _vop(lambda a, b, s: (a + b) << (s & U32(31))),
    "v_and_or_b32": _vop(lambda a, b, c: (a & b) | c),
    "v_or3_b32": _vop(lambda a, b, c: a | b | c),
    "v_add3_u32": _vop(lambda a, b, c: a + b + c),
    "v_bfe_u32": _vop(lambda a, off, width: (a >> (off & U32(31))) & ((U32(1) << (width & U32(31))) - U32(1))),
    "v_bfe_i32": _vop(lambda a, off, width: _bfe_signed(a, off & U32(31), width & U32(31))),
    "v_max_f32": _fop(lambda a, b: np.fmax(a, b)),
    "v_max3_f32": _fop(lambda a, b, c: np.fmax(np.fmax(a, b), c)),
    "v_min_f32": _fop(lambda a, b: np.fmin(a, b)),
    "v_add_f32": _fop(lambda a, b: a + b),
    "v_sub_f32": _fop(lambda a, b: a - b),
    "v_subrev_f32": _fop(lambda a, b: b - a),
    "v_mul_f32": _fop(lambda a, b: a * b),
    "v_fma_f32": _fop(lambda a, b, c: fma_f32(a, b, c)),
    "v_floor_f32": _fop(np.floor),
    "v_fmaak_f32": _fop(lambda a, b, k: fma_f32(a, b, k)),
    "v_fmamk_f32": _fop(lambda a, k, b: fma_f32(a, k, b)),
    # transcendentals: the hardware's are approximate (about 1 ulp); these are correctly
    # rounded, so emulated results can differ from a device's in the last bit
    "v_rcp_f32": _fop(lambda a: (1.0 / a.astype(F64)).astype(F32)),
    "v_log_f32": _fop(lambda a: np.log2(a.astype(F64)).astype(F32)),
    "v_exp_f32": _fop(lambda a: np.exp2(a.astype(F64)).astype(F32)),
})


def _bfe_signed(a, off, width):
    """Bits [off, off + width) of a, sign-extended from the field's top bit."""
    field = ((a.astype(np.int64) >> off.astype(np.int64)) & ((1 << width.astype(np.int64)) - 1))
    sign = (field >> np.maximum(width.astype(np.int64) - 1, 0)) & 1
    return np.where((width > 0) & (sign == 1), field - (1 << width.astype(np.int64)), field).astype(np.int64).astype(U32)


@op("v_add_co_u32", "v_addc_co_u32")
def _v_add_co(w, i):
    """32-bit add with carry out into an SGPR pair (vcc); the _addc form adds a carry in."""
    a, b = (w.vsrc(t).astype(U64) for t in i.args[2:4])
    if i.op == "v_addc_co_u32":
        b = b + lanes_of(w.sval(i.args[4], 64)).astype(U64)
    total = a + b
    carry = w.mask_from(total > U64(0xFFFFFFFF))
    w.set_v(i.args[0], (total & U64(0xFFFFFFFF)).astype(U32))
    w.set_s(i.args[1], carry)


@op("v_cvt_i32_f32")
def _v_cvt_i32_f32(w, i):
    """Truncation toward zero, saturating at the int32 range; NaN gives 0."""
    x = _f(w.vsrc(i.args[1], True)).astype(F64)
    r = np.clip(np.trunc(np.nan_to_num(x, nan=0.0)), -2.0 ** 31, 2.0 ** 31 - 1).astype(np.int64)
    w.set_v(i.args[0], r.astype(I32).view(U32))


@op("v_readfirstlane_b32")
def _v_readfirstlane(w, i):
    """The value of the first active lane (lane 0 when none is) into an SGPR."""
    act = np.flatnonzero(w.active())
    w.set_s(i.args[0], int(w.vsrc(i.args[1])[act[0] if len(act) else 0]))


@op("v_fmac_f32")
def _v_fmac(w, i):
    a, b = (_f(w.vsrc(t, True)) for t in i.args[1:3])
    d = _f(w.vsrc(i.args[0], True))
    w.set_v(i.args[0], _u(fma_f32(a, b, d)))


def _packed_f32(fn):
    """VOP3P packed FP32: each half an ordinary float32 operation. Source s gives the low
    element its lo (op_sel[s] = 1: hi) word and the high element its hi (op_sel_hi[s] = 0: lo)
    word; a constant or a single register is both words; neg_lo / neg_hi negate."""
    def run(w, i):
        nsrc = len(i.args) - 1
        sel_lo = _op_sel(i, "op_sel", [0] * nsrc)
        sel_hi = _op_sel(i, "op_sel_hi", [1] * nsrc)
        neg = [_op_sel(i, "neg_lo", [0] * nsrc), _op_sel(i, "neg_hi", [0] * nsrc)]
        words = []
        for tok in i.args[1:]:
            r = w._regs(tok)
            if r and r[0] in "va" and r[2] == r[1] + 1:
                words.append((w.file(r[0])[r[1]].copy(), w.file(r[0])[r[1] + 1].copy()))
            elif r and r[0] == "s" and r[2] == r[1] + 1:
                words.append(tuple(np.full(WAVE, w.s[r[1] + h], U32) for h in (0, 1)))
            elif r is None or r[1] == r[2]:
                value = w.vsrc(tok, True)
                words.append((value, value))
            else:
                raise ValueError(f"packed FP32 takes register pairs: {i.line}")
        kind, lo, _ = w._regs(i.args[0])
        act = w.active()
        for h, sel in ((0, sel_lo), (1, sel_hi)):
            srcs = [_f(pair[sel[s]]) * (-1 if neg[h][s] else 1) for s, pair in enumerate(words)]
            res = _u(np.asarray(fn(*[x.astype(F32) for x in srcs]), F32))
            w.file(kind)[lo + h] = np.where(act, res, w.file(kind)[lo + h])
    return run


OPS.update({
    "v_pk_fma_f32": _packed_f32(fma_f32),
    "v_pk_add_f32": _packed_f32(lambda a, b: a + b),
    "v_pk_mul_f32": _packed_f32(lambda a, b: a * b),
})


@op("v_cndmask_b32")
def _v_cndmask(w, i):
    a, b = w.vsrc(i.args[1]), w.vsrc(i.args[2])
    mask = w.sval(i.args[3], 64) if len(i.args) > 3 else w.vcc
    sel = lanes_of(mask)
    w.set_v(i.args[0], np.where(sel, b, a))


@op("v_perm_b32")
def _v_perm(w, i):
    """Byte select: bytes of {src0, src1} (src1 the low word) by the selector's bytes."""
    s0, s1, sel = (w.vsrc(t) for t in i.args[1:])
    pool = np.stack([s1 & 0xFF, (s1 >> 8) & 0xFF, (s1 >> 16) & 0xFF, s1 >> 24,
                     s0 & 0xFF, (s0 >> 8) & 0xFF, (s0 >> 16) & 0xFF, s0 >> 24]).astype(U32)
    out = np.zeros(WAVE, U32)
    for byte in range(4):
        code = (sel >> U32(8 * byte)) & U32(0xFF)
        if np.any((code > 7) & (code != 0x0C)):
            raise NotImplementedError("v_perm_b32 selectors above 7 other than 0x0c (zero)")
        picked = pool[np.minimum(code, 7), LANES]
        out |= np.where(code == 0x0C, U32(0), picked) << U32(8 * byte)
    w.set_v(i.args[0], out)


@op("v_lshlrev_b64")
def _v_lshlrev_b64(w, i):
    s = w.vsrc(i.args[1]).astype(U64) & U64(63)
    w.set_v(i.args[0], w.vsrc64(i.args[2]) << s)


@op("v_lshl_add_u64")
def _v_lshl_add_u64(w, i):
    a, s, b = w.vsrc64(i.args[1]), w.vsrc(i.args[2]).astype(U64) & U64(7), w.vsrc64(i.args[3])
    w.set_v(i.args[0], (a << s) + b)


def _vcmp(fn, kind):
    conv = {"i32": lambda x: _i(x), "u32": lambda x: x, "f32": lambda x: _f(x)}[kind]

    def run(w, i):
        a, b = conv(w.vsrc(i.args[1], kind == "f32")), conv(w.vsrc(i.args[2], kind == "f32"))
        w.set_s(i.args[0], w.mask_from(fn(a, b)))
    return run


for _name, _fn in {"eq": np.equal, "ne": np.not_equal, "neq": lambda a, b: ~np.equal(a, b), "lt": np.less, "le": np.less_equal, "gt": np.greater,
                   "ge": np.greater_equal}.items():
    for _kind in ("i32", "u32", "f32"):
        OPS[f"v_cmp_{_name}_{_kind}"] = _vcmp(_fn, _kind)


# ---- global memory: "global_load_dword vdst, vaddr(64-bit), off" or "vdst, voffset(32-bit), sbase"
def _global_addr(w, i, addr_tok, base_tok):
    off = U64(int(i.mods.get("offset", "0"), 0) & 0xFFFFFFFFFFFFFFFF)     # signed (13 bits): wraps
    if base_tok == "off":
        return w.vsrc64(addr_tok) + off
    return w.vsrc(addr_tok).astype(U64) + U64(w.sval(base_tok, 64)) + off


@op("global_load_dword", "global_load_dwordx2", "global_load_dwordx4", "global_load_ubyte")
def _global_load(w, i):
    n = {"global_load_dword": 4, "global_load_dwordx2": 8, "global_load_dwordx4": 16, "global_load_ubyte": 1}[i.op]
    addr = _global_addr(w, i, i.args[1], i.args[2])
    act = w.active()
    data = np.zeros((WAVE, max(n, 4)), np.uint8)
    if act.any():
        data[act, :n] = w.mem.read(addr[act], n)
    w.set_block(i.args[0], data.view(U32))


@op("global_store_dword", "global_store_dwordx2", "global_store_dwordx4", "global_store_byte")
def _global_store(w, i):
    n = {"global_store_dword": 4, "global_store_dwordx2": 8, "global_store_dwordx4": 16, "global_store_byte": 1}[i.op]
    addr = _global_addr(w, i, i.args[0], i.args[2])
    data = np.ascontiguousarray(w.block(i.args[1])).view(np.uint8)[:, :n]
    act = w.active()
    if act.any():
        w.mem.write(addr[act], data[act])


# ---- LDS ("ds_*"): per-workgroup bytes; address = VGPR + offset
def _lds_index(w, addr, nbytes, read=True):
    """Byte indices of an LDS access (lanes x bytes), checked for bounds (and reads for races)."""
    idx = addr.astype(np.int64)[:, None] + np.arange(nbytes)
    if idx.size and (idx.min() < 0 or idx.max() >= len(w.lds)):
        raise IndexError(f"LDS access out of bounds ({len(w.lds)} bytes)")
    if read and w.races is not None and idx.size:
        w.races.read(w.index, idx.reshape(-1))
    return idx


def _lds_store(w, addr, data):
    """Write (lanes x bytes) at the lanes' addresses, checked for bounds and races."""
    idx = _lds_index(w, addr, data.shape[1], read=False)
    if w.races is not None and idx.size:
        w.races.write(w.index, idx.reshape(-1), data.reshape(-1), w.lds[idx].reshape(-1))
    w.lds[idx] = data


@op("ds_write_b8", "ds_write_b16", "ds_write_b32", "ds_write_b64", "ds_write_b128")
def _ds_write(w, i):
    n = int(i.op.rsplit("_b", 1)[1]) // 8
    addr = w.vsrc(i.args[0]) + U32(int(i.mods.get("offset", "0"), 0))
    data = np.ascontiguousarray(w.block(i.args[1])).view(np.uint8)[:, :n]
    act = w.active()
    _lds_store(w, addr[act], data[act])


@op("ds_read_b32", "ds_read_b64", "ds_read_b128")
def _ds_read(w, i):
    n = int(i.op.rsplit("_b", 1)[1]) // 8
    addr = w.vsrc(i.args[1]) + U32(int(i.mods.get("offset", "0"), 0))
    data = np.zeros((WAVE, n), np.uint8)
    act = w.active()
    data[act] = w.lds[_lds_index(w, addr[act], n)]
    w.set_block(i.args[0], data.view(U32))


@op("ds_read_u8", "ds_read_u16")
def _ds_read_narrow(w, i):
    n = 1 if i.op == "ds_read_u8" else 2
    addr = w.vsrc(i.args[1]) + U32(int(i.mods.get("offset", "0"), 0))
    data = np.zeros((WAVE, 4), np.uint8)
    act = w.active()
    data[act, :n] = w.lds[_lds_index(w, addr[act], n)]
    w.set_v(i.args[0], data.view(U32).reshape(-1))


@op("ds_read_b64_tr_b8")
def _ds_read_tr_b8(w, i):
    """Transpose read: each lane names 8 bytes; within each 16 lanes, byte b of lane i is byte
    i % 8 of the 8 named by lane 2 b + i // 8 (two interleaved 8 x 8 byte transposes: lanes
    0-7 from the even lanes, 8-15 from the odd). Of four readings of the prose this is the one
    under which Triton's compiled scaled FP8 dots give their exact products (tests/test_gfx950.py)."""
    addr = w.vsrc(i.args[1]) + U32(int(i.mods.get("offset", "0"), 0))
    act = w.active()
    if not act.all():
        raise NotImplementedError(f"transpose reads with lanes off ({i.line})")
    rows = w.lds[_lds_index(w, addr, 8)]                    # (64 lanes, 8 bytes) at each lane's address
    lane, byte = np.meshgrid(np.arange(WAVE), np.arange(8), indexing="ij")
    src_lane, src_byte = 2 * byte + (lane % 16) // 8, lane % 8
    out = rows[16 * (lane // 16) + src_lane, src_byte]
    w.set_block(i.args[0], np.ascontiguousarray(out.astype(np.uint8)).view(U32))


@op("ds_bpermute_b32")
def _ds_bpermute(w, i):
    """Lane l receives data from lane (address + offset) / 4 (mod 64)."""
    addr = w.vsrc(i.args[1]) + U32(int(i.mods.get("offset", "0"), 0))
    data = w.vsrc(i.args[2])
    w.set_v(i.args[0], data[(addr >> U32(2)) & U32(63)])


# ---- sub-dword addressing (SDWA) and gfx950's bit operations
_SEL = {"BYTE_0": (0, 8), "BYTE_1": (8, 8), "BYTE_2": (16, 8), "BYTE_3": (24, 8), "WORD_0": (0, 16),
        "WORD_1": (16, 16), "DWORD": (0, 32)}


def _field_mask(width):
    return U32((1 << width) - 1)


def _sdwa(fn):
    """A 32-bit op whose sources are byte/word fields (zero-extended) and whose result goes
    into a field of the destination (UNUSED_PAD: zeros around it; UNUSED_PRESERVE: the old bits)."""
    def run(w, i):
        if "sext" in i.line:
            raise NotImplementedError(f"SDWA sign extension ({i.line})")
        srcs = []
        for tok, key in zip(i.args[1:], ("src0_sel", "src1_sel")):
            shift, width = _SEL[i.mods.get(key, "DWORD")]
            srcs.append((w.vsrc(tok) >> U32(shift)) & _field_mask(width))
        shift, width = _SEL[i.mods.get("dst_sel", "DWORD")]
        field = (fn(*srcs) & _field_mask(width)) << U32(shift)
        unused = i.mods.get("dst_unused", "UNUSED_PAD")
        if unused == "UNUSED_PRESERVE":
            field |= w.vsrc(i.args[0]) & ~(_field_mask(width) << U32(shift))
        elif unused != "UNUSED_PAD":
            raise NotImplementedError(f"SDWA {unused} ({i.line})")
        w.set_v(i.args[0], field)
    return run


OPS.update({
    "v_or_b32_sdwa": _sdwa(lambda a, b: a | b),
    "v_and_b32_sdwa": _sdwa(lambda a, b: a & b),
    "v_add_u32_sdwa": _sdwa(lambda a, b: a + b),
    "v_lshlrev_b16": _vop(lambda s, a: ((a & U32(0xFFFF)) << (s & U32(15))) & U32(0xFFFF)),   # high half zeroed
    "v_lshrrev_b16": _vop(lambda s, a: (a & U32(0xFFFF)) >> (s & U32(15))),
    "v_xad_u32": _vop(lambda a, b, c: (a ^ b) + c),
})


@op("v_bitop3_b32", "v_bitop3_b16")
def _v_bitop3(w, i):
    """Each result bit is bit (s0 << 2 | s1 << 1 | s2) of the 8-bit truth table (the b16 form:
    the low halves, the high half of the result zeroed as other 16-bit VALU ops do here)."""
    if "op_sel" in i.mods:
        raise NotImplementedError(f"op_sel on v_bitop3 ({i.line})")
    table = int(i.mods["bitop3"], 0)
    s0, s1, s2 = (w.vsrc(t) for t in i.args[1:4])
    out = np.zeros(WAVE, U32)
    for index in range(8):
        if table >> index & 1:
            pick = ((s0 if index & 4 else ~s0) & (s1 if index & 2 else ~s1) & (s2 if index & 1 else ~s2))
            out |= pick
    w.set_v(i.args[0], out & U32(0xFFFF) if i.op.endswith("b16") else out)


# ---- matrix cores
def _e4m3_table() -> np.ndarray:
    b = np.arange(256)
    e, m = (b >> 3) & 15, (b & 7).astype(F64)
    mag = np.where(e == 0, m * 2.0 ** -9, (1 + m / 8) * 2.0 ** (e - 7.0))
    mag = np.where((b & 0x7F) == 0x7F, np.nan, mag)
    return np.where(b & 0x80, -mag, mag)


E4M3 = _e4m3_table()


def _mfma_32x32x64_e4m3(w, i, scale_a=None, scale_b=None):
    """D (32x32 f32) = A (32x64) B (64x32) + C, both inputs E4M3 (cbsz = blgp = 0).

    Byte j of lane l's 8 registers is A row l % 32 (B: column l % 32) at
    k = 32 (j // 16) + 16 (l // 32) + j % 16: two 16-byte halves, lanes 32-63 holding the
    upper 16 of each 32. That is how Triton's compiled gfx950 code arranges its operands
    (tests/test_gfx950.py), which the issue takes as the judge over prose documentation.
    D/C register r of lane l is row 8 (r // 4) + 4 (l // 32) + r % 4, column l % 32.
    ``scale_a``/``scale_b`` (64 lanes of E8M0 exponents) multiply A's row l % 32 (B's column
    l % 32) over the 32 k of block l // 32 by 2^(e - 127).
    Products are exact and summed in float64, then rounded once to float32."""
    for mod in ("cbsz", "blgp", "abid"):
        if int(i.mods.get(mod, "0"), 0):
            raise NotImplementedError(f"MFMA {mod} (formats other than E4M3) in {i.line}")
    lanes = np.arange(WAVE)
    a_bytes = np.ascontiguousarray(w.block(i.args[1])).view(np.uint8)     # (64, 32)
    b_bytes = np.ascontiguousarray(w.block(i.args[2])).view(np.uint8)
    rows = lanes % 32
    A = np.zeros((32, 64))
    B = np.zeros((64, 32))
    for j in range(32):
        k = 32 * (j // 16) + 16 * (lanes // 32) + j % 16
        A[rows, k] = E4M3[a_bytes[:, j]]
        B[k, rows] = E4M3[b_bytes[:, j]]
    for scale, side in ((scale_a, "A"), (scale_b, "B")):
        if scale is None:
            continue
        if np.any(scale == 255):
            raise NotImplementedError(f"E8M0 NaN scale (255) in {i.line}")
        factor = np.exp2(scale.astype(F64) - 127).reshape(2, 32)          # [k block, row]
        if side == "A":
            A *= np.repeat(factor.T, 32, axis=1)
        else:
            B *= np.repeat(factor, 32, axis=0)
    reg = np.arange(16)
    out_rows = (8 * (reg // 4))[None, :] + (4 * (lanes // 32))[:, None] + (reg % 4)[None, :]   # (64, 16)
    out_cols = np.broadcast_to((lanes % 32)[:, None], (WAVE, 16))
    if _REG.match(i.args[3]):
        C = w.block(i.args[3]).view(F32).astype(F64)[:, :16]
    else:
        C = np.full((WAVE, 16), _f(np.array([_literal(i.args[3], 32, True)], U32))[0], F64)
    D = (A @ B)[out_rows, out_cols] + C
    w.set_block(i.args[0], D.astype(F32).view(U32), masked=False)


@op("v_mfma_f32_32x32x64_f8f6f4")
def _mfma_32x32x64_f8(w, i):
    _mfma_32x32x64_e4m3(w, i)


def _op_sel(i, key, default=(0, 0, 0)):
    if key not in i.mods:
        return list(default)
    return [int(x) for x in i.mods[key].strip("[]").split(",")]


@op("v_mfma_scale_f32_32x32x64_f8f6f4")
def _mfma_scale_32x32x64_f8(w, i):
    """The MFMA with E8M0 block scales from VGPRs (operands 4 and 5); op_sel[s] picks the
    byte of scale register s (op_sel_hi[s] the upper two bytes), as Triton writes it."""
    if "op_sel_hi" not in i.mods:
        raise NotImplementedError(f"scaled MFMA without an explicit op_sel_hi (its default is all ones): {i.line}")
    lo, hi = _op_sel(i, "op_sel"), _op_sel(i, "op_sel_hi")
    scales = []
    for s, tok in enumerate(i.args[4:6]):
        byte = lo[s] + 2 * hi[s]
        scales.append(((w.vsrc(tok) >> U32(8 * byte)) & U32(0xFF)).astype(np.int64))
    _mfma_32x32x64_e4m3(w, i, *scales)


# ---- what Triton's gfx950 attention kernel adds: 64-bit integer ops, lane moves, DPP,
# division, conversions, buffer loads and paired LDS accesses
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


@op("v_readlane_b32")
def _v_readlane(w, i):
    w.set_s(i.args[0], int(w.vsrc(i.args[1])[w.sval(i.args[2]) & 63]))


@op("v_writelane_b32")
def _v_writelane(w, i):
    """Writes one lane whatever exec says."""
    kind, lo, _ = w._regs(i.args[0])
    w.file(kind)[lo][w.sval(i.args[2]) & 63] = w.sval(i.args[1]) & 0xFFFFFFFF


@op("v_mov_b64")
def _v_mov_b64(w, i):
    w.set_v(i.args[0], w.vsrc64(i.args[1]))


@op("v_lshrrev_b64")
def _v_lshrrev_b64(w, i):
    s = w.vsrc(i.args[1]).astype(U64) & U64(63)
    w.set_v(i.args[0], w.vsrc64(i.args[2]) >> s)


@op("v_mad_u64_u32")
def _v_mad_u64_u32(w, i):
    """D (64 bits) = src0 * src1 + src2 (64 bits), the carry out into an SGPR pair."""
    a, b = (w.vsrc(t).astype(object) for t in i.args[2:4])
    c = w.vsrc64(i.args[4]).astype(object)
    full = a * b + c
    w.set_v(i.args[0], np.array([int(x) & 0xFFFFFFFFFFFFFFFF for x in full], U64))
    w.set_s(i.args[1], w.mask_from(np.array([int(x) >> 64 != 0 for x in full])))


def _vcmp64(fn):
    def run(w, i):
        a, b = (w.vsrc64(t).view(np.int64) for t in i.args[1:3])
        w.set_s(i.args[0], w.mask_from(fn(a, b)))
    return run


for _name, _fn in {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
                   "ge": np.greater_equal}.items():
    OPS[f"v_cmp_{_name}_i64"] = _vcmp64(_fn)
OPS["v_cmp_nlt_f32"] = _vcmp(lambda a, b: ~np.less(a, b), "f32")
OPS["v_cmp_ngt_f32"] = _vcmp(lambda a, b: ~np.greater(a, b), "f32")


def _ieee_maximum(a, b):
    """IEEE 754-2019 maximum: NaN propagates, +0 above -0."""
    r = np.maximum(a, b)
    both_zero = (a == 0) & (b == 0)
    return np.where(both_zero, np.where(np.signbit(a) & np.signbit(b), a, np.abs(a)), r)


OPS.update({
    "v_maximum3_f32": _fop(lambda a, b, c: _ieee_maximum(_ieee_maximum(a, b), c)),
    "v_ldexp_f32": lambda w, i: w.set_v(i.args[0], _u(np.ldexp(_f(w.vsrc(i.args[1], True)),
                                                                 np.clip(_i(w.vsrc(i.args[2])), -400, 400)).astype(F32))),
    "v_cvt_f32_u32": _vop(lambda a: _u(a.astype(F64).astype(F32))),
    "v_cvt_u32_f32": lambda w, i: w.set_v(i.args[0], np.clip(np.trunc(np.nan_to_num(_f(w.vsrc(i.args[1], True)).astype(F64),
                                                                                       nan=0.0)), 0, 2.0 ** 32 - 1).astype(U32)),
    # an approximate reciprocal on hardware (integer division sequences correct for its error)
    "v_rcp_iflag_f32": _fop(lambda a: (1.0 / a.astype(F64)).astype(F32)),
    "v_lshrrev_b32_sdwa": _sdwa(lambda s, a: a >> (s & U32(31))),
    "v_lshlrev_b16_sdwa": _sdwa(lambda s, a: (a << (s & U32(15))) & U32(0xFFFF)),
})


# division: v_div_scale / v_div_fmas / v_div_fixup compute the correctly rounded quotient on
# hardware (IEEE mode); the emulator gives v_div_fixup that quotient and passes the rest through
@op("v_div_scale_f32")
def _v_div_scale(w, i):
    w.set_v(i.args[0], w.vsrc(i.args[2], True))
    w.set_s(i.args[1], 0)


@op("v_div_fmas_f32")
def _v_div_fmas(w, i):
    a, b, c = (_f(w.vsrc(t, True)) for t in i.args[1:4])
    w.set_v(i.args[0], _u(fma_f32(a, b, c)))


@op("v_div_fixup_f32")
def _v_div_fixup(w, i):
    den, num = (_f(w.vsrc(t, True)).astype(F64) for t in i.args[2:4])
    w.set_v(i.args[0], _u((num / den).astype(F32)))


@op("v_cvt_pk_bf16_f32")
def _v_cvt_pk_bf16(w, i):
    """Two float32 -> bfloat16 (round to nearest even, NaN kept quiet), src0 in the low half."""
    def bf16(x):
        bits = x.astype(U64)
        rounded = (bits + U64(0x7FFF) + ((bits >> U64(16)) & U64(1))) >> U64(16)
        nan = (x & U32(0x7FFFFFFF)) > U32(0x7F800000)
        return np.where(nan, (x >> U32(16)) | U32(0x40), rounded.astype(U32)) & U32(0xFFFF)
    w.set_v(i.args[0], bf16(w.vsrc(i.args[1])) | (bf16(w.vsrc(i.args[2])) << U32(16)))


@op("v_cvt_scalef32_pk_f32_fp8")
def _v_cvt_scalef32_pk_f32_fp8(w, i):
    """Two E4M3 bytes of src0 (the low word, or the high with op_sel[0]) -> two float32, each
    times the float32 scale, into a register pair."""
    word = _op_sel(i, "op_sel")[0]
    src, scale = w.vsrc(i.args[1]), _f(w.vsrc(i.args[2], True)).astype(F64)
    out = []
    for byte in (2 * word, 2 * word + 1):
        value = E4M3[(src >> U32(8 * byte)) & U32(0xFF)]
        out.append(_u((value * scale).astype(F32)).astype(U64))
    w.set_v(i.args[0], out[0] | (out[1] << U64(32)))


@op("v_permlane32_swap_b32")
def _v_permlane32_swap(w, i):
    """Swaps lanes 32-63 of the first register with lanes 0-31 of the second (both written), as
    LLVM's intrinsic documents it ("rows 2 and 3 of the first operand with rows 0 and 1 of the
    second"). Triton's attention uses it in a symmetric max, which the mirror reading would
    pass as well: its test pins DPP and the rest, not this choice."""
    kind0, a, _ = w._regs(i.args[0])
    kind1, b, _ = w._regs(i.args[1])
    x, y = w.file(kind0)[a].copy(), w.file(kind1)[b].copy()
    w.file(kind0)[a][32:], w.file(kind1)[b][:32] = y[:32], x[32:]


@op("v_mov_b32_dpp")
def _v_mov_dpp(w, i):
    """DPP moves within rows of 16 lanes: quad_perm, row_shl/row_shr (lanes whose source falls
    outside the row keep their value: bound_ctrl off), with row_mask / bank_mask write enables."""
    src = w.vsrc(i.args[1])
    lane = np.arange(WAVE)
    pos = lane % 16
    if "quad_perm" in i.mods:
        sel = [int(x) for x in i.mods["quad_perm"].strip("[]").split(",")]
        source, valid = lane - lane % 4 + np.array(sel)[lane % 4], np.ones(WAVE, bool)
    elif "row_shl" in i.mods or "row_shr" in i.mods:
        n = int(i.mods.get("row_shl", "0"), 0) or -int(i.mods.get("row_shr", "0"), 0)
        source, valid = lane + n, (pos + n >= 0) & (pos + n < 16)
    else:
        raise NotImplementedError(f"DPP control in {i.line}")
    if "bound_ctrl" in i.line:
        raise NotImplementedError(f"DPP bound_ctrl in {i.line}")
    rows, banks = int(i.mods.get("row_mask", "0xf"), 0), int(i.mods.get("bank_mask", "0xf"), 0)
    enabled = ((rows >> (lane // 16)) & 1).astype(bool) & ((banks >> (pos // 4)) & 1).astype(bool) & valid
    kind, lo, _ = w._regs(i.args[0])
    old = w.file(kind)[lo]
    w.file(kind)[lo] = np.where(enabled & w.active(), src[np.clip(source, 0, WAVE - 1)], old)


@op("ds_swizzle_b32")
def _ds_swizzle(w, i):
    """swizzle(SWAP, n): lane l takes lane l ^ n (n < 32: within each half of the wave)."""
    mode = i.mods.get("offset", "")
    if not mode.startswith("swizzle(SWAP,"):
        raise NotImplementedError(f"ds_swizzle mode in {i.line}")
    n = int(mode[len("swizzle(SWAP,"):-1], 0)
    w.set_v(i.args[0], w.vsrc(i.args[1])[np.arange(WAVE) ^ n])


@op("ds_read2_b64", "ds_read2st64_b64", "ds_read2_b32", "ds_read2st64_b32")
def _ds_read2(w, i):
    n = 8 if "b64" in i.op else 4
    unit = n * (64 if "st64" in i.op else 1)
    addr, act = w.vsrc(i.args[1]), w.active()
    data = np.zeros((WAVE, 2 * n), np.uint8)
    for k, key in enumerate(("offset0", "offset1")):
        at = addr + U32(unit * int(i.mods.get(key, "0"), 0))
        data[act, k * n:(k + 1) * n] = w.lds[_lds_index(w, at[act], n)]
    w.set_block(i.args[0], data.view(U32))


@op("ds_write2_b64", "ds_write2st64_b64", "ds_write2_b32", "ds_write2st64_b32")
def _ds_write2(w, i):
    n = 8 if "b64" in i.op else 4
    unit = n * (64 if "st64" in i.op else 1)
    addr, act = w.vsrc(i.args[0]), w.active()
    for k, (tok, key) in enumerate(zip(i.args[1:3], ("offset0", "offset1"))):
        at = addr + U32(unit * int(i.mods.get(key, "0"), 0))
        data = np.ascontiguousarray(w.block(tok)).view(np.uint8)[:, :n]
        _lds_store(w, at[act], data[act])


@op("global_store_short", "global_store_short_d16_hi")
def _global_store_short(w, i):
    addr = _global_addr(w, i, i.args[0], i.args[2])
    word = w.vsrc(i.args[1]) >> U32(16 if i.op.endswith("hi") else 0)
    act = w.active()
    if act.any():
        w.mem.write(addr[act], np.ascontiguousarray((word & U32(0xFFFF)).astype(np.uint16)).view(np.uint8).reshape(-1, 2)[act])


@op("buffer_load_dword", "buffer_load_dwordx2", "buffer_load_dwordx4")
def _buffer_load(w, i):
    """Raw buffer loads (stride 0, ``offen``): address = base + voffset + offset; each dword
    at or past the resource's num_records reads 0 (how Triton masks)."""
    n = {"buffer_load_dword": 1, "buffer_load_dwordx2": 2, "buffer_load_dwordx4": 4}[i.op]
    rsrc = w.sval(i.args[2], 128)
    base, stride, records = rsrc & 0xFFFFFFFFFFFF, (rsrc >> 48) & 0x3FFF, (rsrc >> 64) & 0xFFFFFFFF
    if stride or "offen" not in i.mods or "idxen" in i.mods or w.sval(i.args[3]) != 0:
        raise NotImplementedError(f"buffer addressing other than raw offen with soffset 0: {i.line}")
    offset = w.vsrc(i.args[1]).astype(np.int64) + int(i.mods.get("offset", "0"), 0)
    act = w.active()
    data = np.zeros((WAVE, n), U32)
    for d in range(n):
        at = offset + 4 * d
        ok = act & (at + 4 <= records)
        if ok.any():
            data[ok, d] = w.mem.read((base + at[ok]).astype(U64), 4).view(U32).reshape(-1)
    w.set_block(i.args[0], data)
