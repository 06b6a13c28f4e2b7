"""One key block in the generated Hopper kernel: mask, row max, references, P codes by the
P rule, row sums of the rounded P, P V^T into a fresh accumulator and the two-level
accumulation (zyfa.spec.reference.fp8_attention_spec's block step). Every schedule issues and
waits for these pieces in its own order."""
from __future__ import annotations

import dataclasses

from ...spec.rules import HALF_RULES
from ...spec.constants import NEG_FLOOR, P_OFFSET_LOG2, RESCALE_THRESHOLD
from ..program import Program, Reg
from .cta import Ctx, stage
from .fragments import p_sources
from .layout import ACC, BLOCK_N, HEAD_DIM, acc_column, acc_row_half
from .lean_p import (
    emit_p_code,
    emit_p_code_pair,
    emit_p_exact_pair,
    emit_pack4,
    emit_pack_pairs,
    half_constants,
)
from .smem import emit_descriptor
from .target import f32


@dataclasses.dataclass
class Softmax:
    """What a block's softmax leaves for its P V^T and its row update."""
    p_regs: list          # the A operand of P V^T: 4 k-steps x 4 words of packed E4M3 P
    sums: list            # m64n8 row sums (rowsum "mma" / "hmma"; "mma": after P V^T)
    l_alu: list           # rowsum "alu": the rows' sums of P
    alpha: list           # 2^(A - A_new): the total's factor
    beta: list            # 2^(m - A_new): the block's factor
    A_new: list

    def l_blk(self, rowsum: str) -> list:
        return [self.sums[0], self.sums[2]] if rowsum in ("mma", "hmma") else self.l_alu   # rows g, g + 8


def emit_accumulators(prog: Program) -> tuple[list[Reg], list[Reg], list[Reg]]:
    """The row state before the first block: total = 0 (the output accumulator), the
    reference A = NEG_FLOOR and the row sum l = 0 (rows g and g + 8)."""
    total = prog.regs("f32", ACC)
    for ti in total:
        prog.emit("mov.f32", ti, f32(0.0))
    A, l = prog.regs("f32", 2), prog.regs("f32", 2)
    for half in (0, 1):
        prog.emit("mov.f32", A[half], f32(NEG_FLOOR))
        prog.emit("mov.f32", l[half], f32(0.0))
    return total, A, l


def emit_mask(prog: Program, c: Ctx, t: list[Reg], start_n: Reg, copy: bool = False) -> list[Reg]:
    """t = -inf where key > the row's limit (causal diagonal, or past seqlen_k). ``copy``:
    into new registers, leaving t (a wgmma accumulator) unwritten: ptxas serializes the
    wgmmas in flight if other instructions write accumulator registers meanwhile."""
    reach = prog.regs("u32", 2)
    for half in (0, 1):
        prog.emit("sub.s32", reach[half], c.limits[half], start_n)
        prog.emit("sub.s32", reach[half], reach[half], c.q)
        prog.emit("sub.s32", reach[half], reach[half], c.q)       # limit - start_n - 2q
    out = prog.regs("f32", len(t)) if copy else t
    for i, ti in enumerate(t):
        past = prog.reg("pred")
        prog.emit("setp.lt.s32", past, reach[acc_row_half(i)], acc_column(i))
        if copy:
            prog.emit("selp.f32", out[i], f32(float("-inf")), ti, past)
        else:
            prog.emit("mov.f32", ti, f32(float("-inf")), guard=past)
    return out


def emit_quad_reduce(prog: Program, x: Reg, op: str) -> None:
    """x <- op over the four threads of a quad (they hold one row's columns)."""
    other = prog.reg("f32")
    for lane_mask in (1, 2):
        prog.emit("shfl.bfly", other, x, lane_mask)
        prog.emit(op, x, x, other)


def emit_block(prog: Program, c: Ctx, rule: str, rowsum: str, j: Reg, start_n: Reg, s: list[Reg],
                d_ones: Reg, total: list[Reg], A: list[Reg], l: list[Reg], yes: Reg, tag: str = "",
                masked: bool | None = None, split_pv: bool = False) -> None:
    """One key block from its scores ``s`` (complete): the softmax, P V^T (waited for, with
    any wgmma still in flight), accumulation. ``masked`` and ``split_pv``: emit_softmax, emit_pv."""
    _, v_tile, _, _ = stage(prog, c, j)
    dv = emit_descriptor(prog, v_tile)
    sm = emit_softmax(prog, c, rule, rowsum, start_n, s, d_ones, A, yes, tag, masked)
    emit_pv(prog, rowsum, sm.p_regs, dv, d_ones, sm.sums, total, sm.alpha, sm.beta, yes, tag, 2 if split_pv else 1)
    emit_row_update(prog, sm, rowsum, l, A)


def emit_row_update(prog: Program, sm: Softmax, rowsum: str, l: list[Reg], A: list[Reg]) -> None:
    """l = l * alpha + l_blk * beta; the reference moves to A_new."""
    for half in (0, 1):
        prog.emit("mul.f32", l[half], l[half], sm.alpha[half])
        prog.emit("fma.f32", l[half], sm.l_blk(rowsum)[half], sm.beta[half], l[half])
        prog.emit("mov.f32", A[half], sm.A_new[half])


def emit_softmax(prog: Program, c: Ctx, rule: str, rowsum: str, start_n: Reg, s: list[Reg], d_ones: Reg,
                  A: list[Reg], yes: Reg, tag: str, masked: bool | None = None,
                  wait_rowsum: bool = True) -> Softmax:
    """Mask, row max, references, P codes packed into the A operand, row sums of the rounded
    P (rowsum "hmma": issued as a wgmma group, waited for unless ``wait_rowsum`` is False).

    ``masked``: None masks in place where the block needs it; True masks into new registers;
    False does not mask."""
    emit = prog.emit
    if masked is None:
        unmasked = prog.reg("pred")
        emit("setp.lt.u32", unmasked, start_n, c.band_start)
        emit("bra", f"SCORES_READY{tag}", guard=unmasked)
        emit_mask(prog, c, s, start_n)
        prog.label(f"SCORES_READY{tag}")
    elif masked:
        s = emit_mask(prog, c, s, start_n, copy=True)

    prog.comment("row max of t = S c, taken on S (c > 0: rounding is monotone), lazy reference A, r = m")
    m, neg_m = prog.regs("f32", 2), prog.regs("f32", 2)
    A_new, alpha, beta, thr, diff = (prog.regs("f32", 2) for _ in range(5))
    for half in (0, 1):
        regs = [si for i, si in enumerate(s) if acc_row_half(i) == half]
        emit("max.nan.f32", m[half], regs[0], regs[1])
        for si in regs[2:]:
            emit("max.nan.f32", m[half], m[half], si)
        emit_quad_reduce(prog, m[half], "max.nan.f32")
        all_masked = prog.reg("pred")
        emit("setp.eq.f32", all_masked, m[half], f32(float("-inf")))
        emit("mul.f32", m[half], m[half], c.fac)
        emit("mov.f32", m[half], f32(float("-inf")), guard=all_masked)   # -inf * 0 would be NaN
        emit("max.nan.f32", m[half], m[half], f32(NEG_FLOOR))
        emit("mul.f32", neg_m[half], m[half], f32(-1.0))
        moved = prog.reg("pred")
        emit("add.f32", thr[half], A[half], f32(RESCALE_THRESHOLD))
        emit("setp.gt.f32", moved, m[half], thr[half])
        emit("selp.f32", A_new[half], m[half], A[half], moved)
        emit("sub.f32", diff[half], m[half], A_new[half])
        emit("ex2.f32", beta[half], diff[half])
        emit("sub.f32", diff[half], A[half], A_new[half])
        emit("ex2.f32", alpha[half], diff[half])

    prog.comment(f"P codes ({rule}) packed into the A operand; row sums of the rounded P ({rowsum})")
    exact = rule == "exact"
    l_blk = prog.regs("f32", 2)
    if rowsum == "alu":
        for half in (0, 1):
            emit("mov.f32", l_blk[half], f32(0.0))
    if exact:                          # P = 2^(y + 8): the offset folded into the FFMA's addend
        neg_m8 = prog.regs("f32", 2)
        for half in (0, 1):
            emit("add.f32", neg_m8[half], neg_m[half], f32(float(P_OFFSET_LOG2)))
        neg_m = neg_m8
    ys = []
    for i, si in enumerate(s):
        y = prog.reg("f32")
        emit("fma.f32", y, si, c.fac, neg_m[acc_row_half(i)])   # the spec's y = fma(S, c, -r) (+ 8: exact)
        ys.append(y)

    # the code shifted into a float32's exponent/mantissa is P * 2^-120 exactly (subnormal
    # codes land on float32 subnormals): a shift (and a mask) and one FMA per P
    def add_to_rowsum(i, code_bits):
        emit("fma.f32", l_blk[acc_row_half(i)], code_bits, f32(2.0 ** 120), l_blk[acc_row_half(i)])

    def add_code_to_rowsum(i, word, bit):
        """Add the code at bits ``bit`` .. ``bit`` + 7 of ``word`` (accumulator register i)."""
        scaled = prog.reg("b32")
        emit("shl.b32" if bit <= 20 else "shr.b32", scaled, word, abs(20 - bit))
        emit("and.b32", scaled, scaled, "0x0FF00000")
        add_to_rowsum(i, scaled)

    p16 = {}                           # rowsum="hmma": the half2 P of each pair, in P * 2^-8 (lean) or P (exact)
    if exact:                          # two scores (same row, adjacent keys) a 16-bit pair of codes
        pairs = {i: emit_p_exact_pair(prog, ys[i], ys[i + 1]) for i in range(0, ACC, 2)}
        p_regs = []
        for k in range(BLOCK_N // 32):
            p_regs.append([])
            for src in p_sources(k):
                word = prog.reg("b32")
                emit("mov.b32.pack", word, pairs[src[0]], pairs[src[2]])
                p_regs[-1].append(word)
                for byte, i in enumerate(src) if rowsum == "alu" else ():
                    add_code_to_rowsum(i, word, 8 * byte)
        for i, pair in pairs.items() if rowsum == "hmma" else ():
            p16[i] = prog.reg("b32")
            emit("cvt.f16x2.e4m3x2", p16[i], pair)           # E4M3 values are exact halves
    elif rule in HALF_RULES:                                 # two scores (same row, adjacent keys) a word
        pairs = {}
        consts = half_constants(prog, rule)
        for i in range(0, ACC, 2):
            w = pairs[i] = emit_p_code_pair(prog, ys[i], ys[i + 1], consts, rule)   # codes in bytes 0 and 2
            if rowsum == "hmma":
                # an E4M3 code shifted into a half's exponent/mantissa is P * 2^-8 exactly
                # (subnormals too): two P of a pair as the half2 A operand of the row-sum wgmma
                masked = p16[i] = prog.reg("b32")
                emit("and.b32", masked, w, "0x00FF00FF")
                emit("shl.b32", masked, masked, 7)
            if rowsum == "alu":
                add_code_to_rowsum(i, w, 0)
                add_code_to_rowsum(i + 1, w, 16)
        p_regs = [[emit_pack_pairs(prog, pairs[src[0]], pairs[src[2]]) for src in p_sources(k)]
                  for k in range(BLOCK_N // 32)]
    else:
        codes = []
        for i, y in enumerate(ys):
            w = emit_p_code(prog, y, rule)                   # low byte: the E4M3 code
            codes.append(w)
            if rowsum == "alu":
                scaled = prog.reg("b32")
                emit("shl.b32", scaled, w, 20)               # the bits above the code are the magic's zeros
                add_to_rowsum(i, scaled)
        p_regs = [[emit_pack4(prog, [codes[r] for r in src]) for src in p_sources(k)] for k in range(BLOCK_N // 32)]
    if rowsum == "alu":
        for half in (0, 1):
            emit_quad_reduce(prog, l_blk[half], "add.f32")

    sums = prog.regs("f32", 4)           # m64n8: every column holds the row's sum
    if rowsum == "hmma":
        # keys 16 t .. 16 t + 15 of rows g and g + 8: the half2 pairs of accumulator column
        # blocks 2 t and 2 t + 1 are the f16 A fragment (a0..a3) as they stand; B: halves of 256
        # (P * 2^-8, the half rule) or of 1 (P, exact) (the ones tile: every element, so no
        # descriptor step), float32 accumulation. Waited
        # for before P.V, so the half2 P is dead before P.V's accumulator lives (registers)
        prog.comment("row sums of P in half precision")
        emit("wgmma.fence")
        for t in range(BLOCK_N // 16):
            a_regs = ", ".join(str(p16[8 * t + d]) for d in (0, 2, 4, 6))
            emit("wgmma.m64n8k16.f16.rs", ", ".join(map(str, sums)), a_regs, d_ones, 0 if t == 0 else yes)
        emit("wgmma.commit")
        if wait_rowsum:
            emit("wgmma.wait", 0)
    return Softmax(p_regs, sums, l_blk, alpha, beta, A_new)


def emit_rescale(prog: Program, total: list[Reg], alpha: list[Reg], tag: str) -> None:
    """total *= alpha, only when some row's reference moved (alpha != 1)."""
    emit = prog.emit
    keep = prog.regs("pred", 2)
    for half in (0, 1):
        emit("setp.neu.f32", keep[half], alpha[half], f32(1.0))
    either = prog.reg("pred")
    emit("or.pred", either, keep[0], keep[1])
    emit("bra.div", f"RESCALED{tag}", guard=f"!{either}")
    for i, ti in enumerate(total):
        emit("mul.f32", ti, ti, alpha[acc_row_half(i)])
    prog.label(f"RESCALED{tag}")


def emit_pv_issue(prog: Program, rowsum: str, p_regs, dv: Reg, d_ones: Reg, sums, yes: Reg,
                   h: int = 0, parts: int = 1) -> list[Reg]:
    """Issue (and commit) value columns ``h`` of ``parts`` of block = P V^T into a fresh
    accumulator, which it returns (+ the row sums = P . ones, rowsum "mma")."""
    emit = prog.emit
    width = ACC // parts
    op = {1: "wgmma.m64n128k32.e4m3.rs", 2: "wgmma.m64n64k32.e4m3.rs"}[parts]
    prog.comment(f"block columns {128 // parts * h}.. = P V^T in a fresh accumulator"
                 + ("; row sums = P . ones" if rowsum == "mma" and h == 0 else ""))
    o = prog.regs("f32", width)
    o_list = ", ".join(map(str, o))
    emit("wgmma.fence")
    for k in range(BLOCK_N // 32):
        bk = prog.reg("u64")
        a_regs = ", ".join(map(str, p_regs[k]))
        emit("add.u64", bk, dv, 2 * k + HEAD_DIM // parts * 128 // 16 * h)
        emit(op, o_list, a_regs, bk, 0 if k == 0 else yes)
        if rowsum == "mma" and h == 0:
            ok = prog.reg("u64")
            emit("add.u64", ok, d_ones, 2 * k)
            emit("wgmma.m64n8k32.e4m3.rs", ", ".join(map(str, sums)), a_regs, ok, 0 if k == 0 else yes)
    emit("wgmma.commit")
    return o


def emit_fold(prog: Program, o: list[Reg], total: list[Reg], beta: list[Reg], h: int = 0) -> None:
    """total columns of part ``h`` += block * beta (the total already multiplied by alpha)."""
    for i, oi in enumerate(o):
        ti = total[len(o) * h + i]
        prog.emit("fma.f32", ti, oi, beta[acc_row_half(i)], ti)


def emit_pv(prog, rowsum, p_regs, dv, d_ones, sums, total, alpha, beta, yes, tag, parts: int = 1) -> None:
    """block = P V^T in a fresh accumulator (+ the row sums = P . ones, rowsum "mma"); then
    total = total * alpha + block * beta. ``parts`` = 2: in two halves of 64 value columns,
    each folded into the total before the next (32 registers fewer): V^T rows 64 h .. start
    8 KB (512 descriptor units) into the tile, and register i of the m64n64 half is register
    32 h + i of the m64n128 total."""
    if parts > 1:                      # the total is folded half by half: rescale it first
        emit_rescale(prog, total, alpha, tag)
    for h in range(parts):
        o = emit_pv_issue(prog, rowsum, p_regs, dv, d_ones, sums, yes, h, parts)
        prog.emit("wgmma.wait", 0)
        if parts == 1:
            prog.comment("total = total * alpha + block * beta; the multiply only when a reference moved")
            emit_rescale(prog, total, alpha, tag)
        emit_fold(prog, o, total, beta, h)
