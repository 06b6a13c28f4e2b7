"""A key block's softmax in the generated Hopper kernel: the reference (lazy per-block, or
the running max of the fast mode), y = S c - r, the P codes by the P rule packed into P V^T's
A operand, and the row sums.

Row sums of the rounded P: for the rules in lean_p.HMMA_RULES (exact and the half rules)
from half-precision wgmmas with float32 accumulation (P pairs are half2 A operands already);
for the float32 lean rules in float32 on the ALUs, 2 instructions a score. Both are the
spec's sums up to float32 ordering. The fast mode with the exact rule sums the exponentials
before their rounding instead (spec.rules.sums_unrounded): an FADD a score, each thread its own
columns across the blocks, the quad's parts added after the last (emit_row_sum_parts)."""
from __future__ import annotations

import dataclasses

from ...spec.constants import P_OFFSET_LOG2, RESCALE_THRESHOLD
from ...spec.rules import HALF_RULES
from ..program import Program, Reg
from .cta import Cta, Rows
from .fragments import acc_row_half, p_sources
from .int8_qk import emit_biased_scores, emit_grid_addend, emit_grid_max, int_row_max
from .lean_p import (
    HMMA_RULES,
    emit_p_code,
    emit_p_code_pair,
    emit_p_exact_pair,
    emit_pack4,
    emit_pack_pairs,
    half_constants,
    thread_row_sums,
)
from .scores import emit_band_mask, emit_quad_reduce, emit_row_max
from .target import f32



@dataclasses.dataclass(frozen=True)
class Softmax:
    """What a block's softmax leaves for its P V^T and its row update."""
    p_regs: list[list[Reg]]  # the A operand of P V^T: 4 k-steps x 4 words of packed E4M3 P
    l_blk: list[Reg]         # the rows' sums of P (rows g, g + 8)
    alpha: list[Reg] | None  # 2^(A - A_new): the total's factor
    beta: list[Reg] | None   # 2^(m - A_new): the block's factor (deferred: 2^(m - A); running: 1, None)
    A_new: list[Reg] | None  # the rows' references after this block
    m: list[Reg] | None = None       # deferred (emit_reference_moves): the rows' maxima and
    moved: list[Reg] | None = None   # whether each passed A + RESCALE_THRESHOLD


def emit_softmax(prog: Program, c: Cta, rows: Rows, rule: str, start_n: Reg, s: list[Reg], d_ones: Reg | None,
                 A: list[Reg], tag: str = "", wait_rowsum: bool = True, masked: bool = True,
                 deferred: bool = False, facs: list[Reg] | None = None, running: bool = False) -> Softmax:
    """Mask (in place, in the blocks that need it), row max, references, P codes packed into
    the A operand, row sums of the rounded P (HMMA_RULES: issued as a wgmma group against
    the ones tile at descriptor ``d_ones``, waited for unless ``wait_rowsum`` is False).
    ``masked`` False: the caller knows the block lies below the band (no test, no mask).
    ``facs``: the two rows' factors (>= 0 or NaN; int8_qk), else the head's rows.fac.
    ``running``: the reference is the running max A_new = max(A, m) (no threshold), P's too.
    int8_qk (block references only): ``s`` holds int32 scores, biased (R = M + S) after the
    row max where int_row_max, else first; the max goes onto M c's grid (emit_grid_max)."""
    emit = prog.emit
    facs = facs or [rows.fac, rows.fac]
    int8 = c.layout.int8_qk
    ints = int_row_max(c.layout) and not running
    if int8 and not ints:
        emit_biased_scores(prog, s)
    if masked:
        emit_band_mask(prog, c, rows, s, start_n, tag, ints)

    if running:
        A_new, alpha, neg_m = _emit_running_reference(prog, s, facs, A, masked)
        return _emit_p_and_sums(prog, c, rows, rule, start_n, s, d_ones, tag, wait_rowsum, masked, facs,
                                neg_m, alpha, None, A_new, None, None, running=True)
    prog.comment("row max of t = S c, taken on S (c > 0: rounding is monotone), lazy reference A, r = m")
    m, neg_m = prog.regs("f32", 2), prog.regs("f32", 2)
    beta, diff = prog.regs("f32", 2), prog.regs("f32", 2)
    A_new, alpha = (None, None) if deferred else (prog.regs("f32", 2), prog.regs("f32", 2))
    moved, thr = prog.regs("pred", 2), prog.regs("f32", 2)
    for half in (0, 1):
        all_masked = emit_row_max(prog, s, None if int8 else facs[half], half, m[half], masked,
                                  floor=not int8, ints=ints, biased=int8 and not ints)
        if int8:                       # neg_m unused: _emit_p_and_sums builds the addend from m
            emit_grid_max(prog, facs[half], m[half], all_masked)
        else:
            emit("neg.f32", neg_m[half], m[half])
        emit("add.f32", thr[half], A[half], f32(RESCALE_THRESHOLD))
        emit("setp.gt.f32", moved[half], m[half], thr[half])
        if deferred:                   # beta where the reference stays; emit_reference_moves fixes the rest
            emit("sub.f32", diff[half], m[half], A[half])
            emit("ex2.f32", beta[half], diff[half])
            continue
        emit("selp.f32", A_new[half], m[half], A[half], moved[half])
        emit("sub.f32", diff[half], m[half], A_new[half])
        emit("ex2.f32", beta[half], diff[half])
        emit("sub.f32", diff[half], A[half], A_new[half])
        emit("ex2.f32", alpha[half], diff[half])
    if ints:
        emit_biased_scores(prog, s)
    return _emit_p_and_sums(prog, c, rows, rule, start_n, s, d_ones, tag, wait_rowsum, masked, facs,
                            neg_m, alpha, beta, A_new, m, moved)


def _emit_running_reference(prog: Program, s: list[Reg], facs: list[Reg], A: list[Reg],
                            masked: bool) -> tuple[list[Reg], list[Reg], list[Reg]]:
    """The running max: A_new = max(A, m) (A >= NEG_FLOOR, so m needs no floor; NaN stays
    NaN), alpha = 2^(A - A_new); returns (A_new, alpha, -A_new)."""
    emit = prog.emit
    prog.comment("row max of t = S c, the running reference A_new = max(A, m), alpha = 2^(A - A_new)")
    A_new, alpha, neg_m = prog.regs("f32", 2), prog.regs("f32", 2), prog.regs("f32", 2)
    for half in (0, 1):
        m, diff = prog.reg("f32"), prog.reg("f32")
        emit_row_max(prog, s, facs[half], half, m, masked, floor=False)
        emit("max.nan.f32", A_new[half], A[half], m)
        emit("sub.f32", diff, A[half], A_new[half])
        emit("ex2.f32", alpha[half], diff)
        emit("neg.f32", neg_m[half], A_new[half])
    return A_new, alpha, neg_m


def _emit_p_and_sums(prog: Program, c: Cta, rows: Rows, rule: str, start_n: Reg, s: list[Reg], d_ones: Reg | None,
                     tag: str, wait_rowsum: bool, masked: bool, facs: list[Reg], neg_m: list[Reg],
                     alpha, beta, A_new, m, moved, running: bool = False) -> Softmax:
    """y = S c - r (r = -neg_m; int8_qk: R c - X, the addend built here from m), the P codes
    packed into the A operand and the row sums of the rounded P; the Softmax record with the
    reference's registers."""
    emit = prog.emit
    unrounded = thread_row_sums(rule, running)
    hmma = rule in HMMA_RULES and not unrounded
    prog.comment(f"P codes ({rule}) packed into the A operand; " + (
        "this thread's part of the row sums of the exponentials (ALU)" if unrounded else
        "row sums of the rounded P " + ("(half-precision wgmma)" if hmma else "(ALU)")))
    l_alu = None                       # the ALU row sums' registers (float32 lean rules)
    if not hmma:
        l_alu = prog.regs("f32", 2)
        for half in (0, 1):
            emit("mov.f32", l_alu[half], f32(0.0))
    if c.layout.int8_qk:               # beside R = M + S: y = fma(R, c, -X) = fma(S, c, -m)
        neg_m = [emit_grid_addend(prog, facs[half], m[half], rule == "exact") for half in (0, 1)]
    elif rule == "exact":              # P = 2^(y + 8): the offset folded into the FFMA's addend
        neg_m8 = prog.regs("f32", 2)
        for half in (0, 1):
            emit("add.f32", neg_m8[half], neg_m[half], f32(float(P_OFFSET_LOG2)))
        neg_m = neg_m8
    ys = []
    for i, si in enumerate(s):
        y = prog.reg("f32")
        emit("fma.f32", y, si, facs[acc_row_half(i)], neg_m[acc_row_half(i)])   # y = fma(S, c, -r) (+ 8: exact)
        ys.append(y)
    if c.layout.int8_qk and masked:    # a NaN factor (a non-finite k) made masked y NaN: -inf, as the spec's
        emit_band_mask(prog, c, rows, ys, start_n, tag + "_Y")

    if unrounded:
        exps = []
        p_regs, _ = _emit_p_exact(prog, ys, exps)
        parts = [emit_sum_tree(prog, [e for i, e in enumerate(exps) if acc_row_half(i) == half]) for half in (0, 1)]
        return Softmax(p_regs, parts, alpha, beta, A_new, m, moved)
    if rule == "exact":
        p_regs, p16 = _emit_p_exact(prog, ys)
    elif rule in HALF_RULES:
        p_regs, p16 = _emit_p_half(prog, rule, ys)
    else:
        p_regs = _emit_p_lean(prog, rule, ys, l_alu)
        for half in (0, 1):
            emit_quad_reduce(prog, l_alu[half], "add.f32")
        return Softmax(p_regs, l_alu, alpha, beta, A_new, m, moved)

    sums = prog.regs("f32", 4)           # m64n8: every column holds the row's sum
    # keys 16 t .. 16 t + 15 of rows g and g + 8: the half2 pairs of accumulator column
    # blocks 2 t and 2 t + 1 are the f16 A fragment (a0..a3) as they stand; B: halves of 256
    # (P * 2^-8, the half rule) or of 1 (P, exact) (the ones tile: every element, so no
    # descriptor step), float32 accumulation. Waited for before P.V, so the half2 P is dead
    # before P.V's accumulator lives (registers)
    prog.comment("row sums of P in half precision")
    emit("wgmma.fence")
    for t in range(len(ys) // 8):                        # k-steps of 16 keys
        a_regs = ", ".join(str(p16[8 * t + d]) for d in (0, 2, 4, 6))
        emit("wgmma.m64n8k16.f16.rs", ", ".join(map(str, sums)), a_regs, d_ones, 0 if t == 0 else c.accumulate)
    emit("wgmma.commit")
    if wait_rowsum:
        emit("wgmma.wait", 0)
    return Softmax(p_regs, [sums[0], sums[2]], alpha, beta, A_new, m, moved)


def _emit_p_exact(prog: Program, ys: list[Reg], exps: list[Reg] | None = None) -> tuple[list[list[Reg]], dict[int, Reg]]:
    """The exact rule: two scores (same row, adjacent keys) a 16-bit pair of codes; the A
    operand's words, and each pair as half2 P (E4M3 values are exact halves). ``exps``: the
    exponentials before rounding appended to it in score order, and no half2 P."""
    pairs = {i: emit_p_exact_pair(prog, ys[i], ys[i + 1], exps) for i in range(0, len(ys), 2)}
    p_regs, p16 = [], {}
    for k in range(len(ys) // 16):                 # k-steps of 32 keys: 16 of a thread's scores
        p_regs.append([])
        for src in p_sources(k):
            word = prog.reg("b32")
            prog.emit("mov.b32.pack", word, pairs[src[0]], pairs[src[2]])
            p_regs[-1].append(word)
            if exps is not None:
                continue
            # each pair converted from the packed word's half (the same 16 bits): converting
            # the pair itself made ptxas copy it back out of the word, a PRMT a pair
            halves = prog.regs("b16", 2)
            prog.emit("mov.b32.unpack", *halves, word)
            for i, half in zip((src[0], src[2]), halves):
                p16[i] = prog.reg("b32")
                prog.emit("cvt.f16x2.e4m3x2", p16[i], half)
    return p_regs, p16


def _emit_p_half(prog: Program, rule: str, ys: list[Reg]) -> tuple[list[list[Reg]], dict[int, Reg]]:
    """A half rule: two scores (same row, adjacent keys) a word, codes in bytes 0 and 2; the
    A operand's words, and each pair as half2 P * 2^-8 (an E4M3 code shifted into a half's
    exponent/mantissa is P * 2^-8 exactly, subnormals too)."""
    pairs, p16 = {}, {}
    consts = half_constants(prog, rule)
    for i in range(0, len(ys), 2):
        w = pairs[i] = emit_p_code_pair(prog, ys[i], ys[i + 1], consts, rule)
        masked = p16[i] = prog.reg("b32")
        prog.emit("and.b32", masked, w, "0x00FF00FF")
        prog.emit("shl.b32", masked, masked, 7)
    p_regs = [[emit_pack_pairs(prog, pairs[src[0]], pairs[src[2]]) for src in p_sources(k)]
              for k in range(len(ys) // 16)]
    return p_regs, p16


def _emit_p_lean(prog: Program, rule: str, ys: list[Reg], l_alu: list[Reg]) -> list[list[Reg]]:
    """A float32 lean rule: one code a score, packed four a word; each code added to its
    row's sum in ``l_alu`` (the thread's part): the code shifted into a float32's
    exponent/mantissa is P * 2^-120 exactly (subnormal codes land on float32 subnormals), so
    a shift and one FMA a score."""
    codes = []
    for i, y in enumerate(ys):
        w = emit_p_code(prog, y, rule)                       # low byte: the E4M3 code
        codes.append(w)
        scaled = prog.reg("b32")
        prog.emit("shl.b32", scaled, w, 20)                  # the bits above the code are the magic's zeros
        row_sum = l_alu[acc_row_half(i)]
        prog.emit("fma.f32", row_sum, scaled, f32(2.0 ** 120), row_sum)
    return [[emit_pack4(prog, [codes[r] for r in src]) for src in p_sources(k)] for k in range(len(ys) // 16)]


def emit_sum_tree(prog: Program, values: list[Reg], chains: int = 4) -> Reg:
    """The float32 sum of ``values`` in ``chains`` independent chains joined at the end (the
    order is the spec's float32 ordering noise; chains hide the FADD latency)."""
    heads = []
    for c in range(chains):
        part = values[c::chains]
        acc = prog.reg("f32")
        prog.emit("add.f32", acc, part[0], part[1])
        for v in part[2:]:
            prog.emit("add.f32", acc, acc, v)
        heads.append(acc)
    while len(heads) > 1:
        a, b = heads.pop(0), heads.pop(0)
        prog.emit("add.f32", a, a, b)
        heads.append(a)
    return heads[0]


def emit_row_sum_parts(prog: Program, l: list[Reg], rule: str, running: bool) -> None:
    """After the last block: the quad's parts of each row sum added (thread_row_sums)."""
    if thread_row_sums(rule, running):
        for half in (0, 1):
            emit_quad_reduce(prog, l[half], "add.f32")
