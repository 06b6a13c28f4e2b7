"""Vector (VALU) instructions of the emulator: integer and float32 arithmetic, packed FP32,
compares into lane masks, byte permutes, SDWA fields, bit operations, lane moves (readlane,
DPP, permlane) and division. Each writes only the lanes exec enables, as the hardware does."""
from __future__ import annotations

import numpy as np

from .core import F32, F64, I32, LANES, OPS, U32, U64, WAVE, as_f32, as_u32, fma_f32, lanes_of, op, op_sel


# ---- VALU
def _vop(fn, float_op=False):
    def run(w, i):
        srcs = [w.vsrc(t, float_op) for t in i.args[1:]]
        w.set_v(i.args[0], fn(*srcs))
    return run


def _fop(fn):
    """A float32 operation on uint32 lanes."""
    return _vop(lambda *xs: as_u32(fn(*[as_f32(x) for x in xs])), float_op=True)


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
    x = as_f32(w.vsrc(i.args[1], True)).astype(F64)
    r = np.clip(np.trunc(np.nan_to_num(x, nan=0.0)), -2.0 ** 31, 2.0 ** 31 - 1).astype(np.int64)
    w.set_v(i.args[0], r.astype(I32).view(U32))


@op("v_readfirstlane_b32")
def _v_readfirstlane(w, i):
    """The value of the first active lane (lane 0 when none is) into an SGPR."""
    act = np.flatnonzero(w.active())
    w.set_s(i.args[0], int(w.vsrc(i.args[1])[act[0] if len(act) else 0]))


@op("v_fmac_f32")
def _v_fmac(w, i):
    a, b = (as_f32(w.vsrc(t, True)) for t in i.args[1:3])
    d = as_f32(w.vsrc(i.args[0], True))
    w.set_v(i.args[0], as_u32(fma_f32(a, b, d)))


def _packed_f32(fn):
    """VOP3P packed FP32: each half an ordinary float32 operation. Source s gives the low
    element its lo (op_sel[s] = 1: hi) word and the high element its hi (op_sel_hi[s] = 0: lo)
    word; a constant or a single register is both words; neg_lo / neg_hi negate."""
    def run(w, i):
        nsrc = len(i.args) - 1
        sel_lo = op_sel(i, "op_sel", [0] * nsrc)
        sel_hi = op_sel(i, "op_sel_hi", [1] * nsrc)
        neg = [op_sel(i, "neg_lo", [0] * nsrc), op_sel(i, "neg_hi", [0] * nsrc)]
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
            srcs = [as_f32(pair[sel[s]]) * (-1 if neg[h][s] else 1) for s, pair in enumerate(words)]
            res = as_u32(np.asarray(fn(*[x.astype(F32) for x in srcs]), F32))
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
    conv = {"i32": lambda x: _i(x), "u32": lambda x: x, "f32": lambda x: as_f32(x)}[kind]

    def run(w, i):
        a, b = conv(w.vsrc(i.args[1], kind == "f32")), conv(w.vsrc(i.args[2], kind == "f32"))
        w.set_s(i.args[0], w.mask_from(fn(a, b)))
    return run


for _name, _fn in {"eq": np.equal, "ne": np.not_equal, "neq": lambda a, b: ~np.equal(a, b), "lt": np.less, "le": np.less_equal, "gt": np.greater,
                   "ge": np.greater_equal}.items():
    for _kind in ("i32", "u32", "f32"):
        OPS[f"v_cmp_{_name}_{_kind}"] = _vcmp(_fn, _kind)



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



# ---- what Triton's gfx950 attention kernel adds: 64-bit integer ops, lane moves, DPP, division
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
    "v_ldexp_f32": lambda w, i: w.set_v(i.args[0], as_u32(np.ldexp(as_f32(w.vsrc(i.args[1], True)),
                                                                 np.clip(_i(w.vsrc(i.args[2])), -400, 400)).astype(F32))),
    "v_cvt_f32_u32": _vop(lambda a: as_u32(a.astype(F64).astype(F32))),
    "v_cvt_u32_f32": lambda w, i: w.set_v(i.args[0], np.clip(np.trunc(np.nan_to_num(as_f32(w.vsrc(i.args[1], True)).astype(F64),
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
    a, b, c = (as_f32(w.vsrc(t, True)) for t in i.args[1:4])
    w.set_v(i.args[0], as_u32(fma_f32(a, b, c)))


@op("v_div_fixup_f32")
def _v_div_fixup(w, i):
    den, num = (as_f32(w.vsrc(t, True)).astype(F64) for t in i.args[2:4])
    w.set_v(i.args[0], as_u32((num / den).astype(F32)))


@op("v_cvt_pk_bf16_f32")
def _v_cvt_pk_bf16(w, i):
    """Two float32 -> bfloat16 (round to nearest even, NaN kept quiet), src0 in the low half."""
    def bf16(x):
        bits = x.astype(U64)
        rounded = (bits + U64(0x7FFF) + ((bits >> U64(16)) & U64(1))) >> U64(16)
        nan = (x & U32(0x7FFFFFFF)) > U32(0x7F800000)
        return np.where(nan, (x >> U32(16)) | U32(0x40), rounded.astype(U32)) & U32(0xFFFF)
    w.set_v(i.args[0], bf16(w.vsrc(i.args[1])) | (bf16(w.vsrc(i.args[2])) << U32(16)))




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
