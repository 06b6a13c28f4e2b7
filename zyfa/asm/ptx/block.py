"""One key block in the generated Hopper kernel: S = Q K^T, mask, row max, references, P
codes by the P rule, row sums of the rounded P, P V^T into a fresh accumulator and the
two-level accumulation (zyfa.spec.reference.fp8_attention_spec's block step). Each schedule
issues and waits for these pieces in its own order.

``running`` (ref_rule "running", the fast mode): FlashAttention's running max is every block's
reference, so P V^T accumulates straight into the total (rescaled first where a row's max
moved): no fresh accumulator and no fold, 64 registers and 64 FFMAs a block fewer.

Row sums of the rounded P: for the rules in lean_p.HMMA_RULES (exact and the half rules)
from half-precision wgmmas with float32 accumulation (P pairs are half2 A operands already);
for the float32 lean rules in float32 on the ALUs, 2 instructions a score. Both are the
spec's sums up to float32 ordering. The fast mode with the exact rule sums the exponentials
before their rounding instead (spec.rules.sums_unrounded): an FADD a score, each thread its own
columns across the blocks, the quad's parts added after the last (emit_row_sum_parts)."""
from __future__ import annotations

import dataclasses

from ...spec.rules import HALF_RULES
from ...spec.constants import NEG_FLOOR, P_OFFSET_LOG2, RESCALE_THRESHOLD
from ..program import Program, Reg
from .cta import Cta, Rows
from .fragments import acc_column, acc_row_half, p_sources
from .layout import ACC, BLOCK_M, BLOCK_N, HEAD_DIM
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
from .loads import stage
from .smem import emit_descriptor, emit_wait
from .target import f32
from .window import emit_window_band_mask


# the block loop is emitted twice (serial.py, the pipelined consumer of specialized.py): the
# blocks below the masked band (no mask test, no guard for fully masked rows), then the band's;
# (label tag, masked) of each copy
BLOCK_LOOPS = (("_BELOW", False), ("", True))
BLOCK_LOOP_COPIES = len(BLOCK_LOOPS)


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


def emit_accumulators(prog: Program, n: int = ACC) -> tuple[list[Reg], list[Reg], list[Reg]]:
    """The row state before the first block: total = 0 (the output accumulator, ``n``
    registers: Dv / 2), the reference A = NEG_FLOOR and the row sum l = 0 (rows g and g + 8)."""
    total = prog.regs("f32", n)
    for ti in total:
        prog.emit("mov.f32", ti, f32(0.0))
    A, l = prog.regs("f32", 2), prog.regs("f32", 2)
    for half in (0, 1):
        prog.emit("mov.f32", A[half], f32(NEG_FLOOR))
        prog.emit("mov.f32", l[half], f32(0.0))
    return total, A, l


def emit_row_sum_parts(prog: Program, l: list[Reg], rule: str, running: bool) -> None:
    """After the last block: the quad's parts of each row sum added (thread_row_sums)."""
    if thread_row_sums(rule, running):
        for half in (0, 1):
            emit_quad_reduce(prog, l[half], "add.f32")


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


# Q steps whose descriptors are held across the block loop; more (16-bit Dqk 192 / 256: 12, 16)
# did not fit the uniform registers beside K's and V's, and the loop moved them back from vector
# registers before its HGMMAs, slower on the H200 (docs/decisions.md)
Q_DESCRIPTORS_HELD = 8


def emit_q_descriptors(prog: Program, c: Cta, q_tile: Reg, dq: Reg) -> list[list[Reg]]:
    """Q's wgmma descriptor for every K step of S = Q K^T, by column tile, from the Q tile at
    ``q_tile`` (descriptor ``dq``). Up to Q_DESCRIPTORS_HELD steps: built once before the block
    loop, which then only reads them (rebuilt a block, each step cost a 64-bit add and moves
    into uniform registers). More: only each column tile's first, emit_scores adds the rest."""
    out = []
    held = sum(width // 32 for _, width in c.layout.qk_tiles) <= Q_DESCRIPTORS_HELD
    for col, width in c.layout.qk_tiles:                     # column tile col: BLOCK_M x col on
        d = dq
        if col:
            q_col = prog.reg("u32")
            prog.emit("add.u32", q_col, q_tile, BLOCK_M * col)
            d = emit_descriptor(prog, q_col, width)
        steps = [d]
        for step in range(1, width // 32 if held else 1):     # 32 bytes of K: 2 descriptor units
            a = prog.reg("u64")
            prog.emit("add.u64", a, d, 2 * step)
            steps.append(a)
        out.append(steps)
    return out


def emit_scores(prog: Program, c: Cta, q_descs: list[list[Reg]], j: Reg, s: list[Reg], tag: str,
                wait: bool = True) -> None:
    """Wait for key block ``j``'s stage (unless the caller did), then issue S = Q K^T into
    ``s`` with Q's descriptors ``q_descs`` (emit_q_descriptors); committed, not waited."""
    emit = prog.emit
    layout = c.layout
    k_tile, _, bar, phase = stage(prog, c, j)
    if wait:
        emit_wait(prog, bar, phase, f"WAIT_KV{tag}")
    tiles = []
    for (col, width), q_steps in zip(layout.qk_tiles, q_descs):
        k_col = k_tile
        if col:
            k_col = prog.reg("u32")
            emit("add.u32", k_col, k_tile, layout.block_n * col)
        tiles.append((q_steps, width // 32, emit_descriptor(prog, k_col, width)))
    prog.comment("S = Q K^T")
    s_list = ", ".join(map(str, s))
    shape = f"m64n{layout.block_n}"               # a row's scores for the block's keys
    op = (f"wgmma.{shape}k32.s8.ss" if layout.int8_qk else f"wgmma.{shape}k32.e4m3.ss" if layout.is_fp8
          else f"wgmma.{shape}k16.{layout.dtype}.ss")
    emit("wgmma.fence")
    first = True
    for q_steps, n_steps, dk_t in tiles:
        for step in range(n_steps):
            if step < len(q_steps):
                ak = q_steps[step]
            else:                                         # not held: built here from the tile's first
                ak = prog.reg("u64")
                emit("add.u64", ak, q_steps[0], 2 * step)
            bk = prog.reg("u64")
            emit("add.u64", bk, dk_t, 2 * step)
            emit(op, s_list, ak, bk, 0 if first else c.accumulate)
            first = False
    emit("wgmma.commit")


def emit_mask(prog: Program, c: Cta, rows: Rows, t: list[Reg], start_n: Reg) -> None:
    """t = -inf where key > the row's limit (causal diagonal, or past seqlen_k)."""
    q = c.thread.q
    reach = prog.regs("u32", 2)
    for half in (0, 1):
        prog.emit("sub.s32", reach[half], rows.limits[half], start_n)
        prog.emit("sub.s32", reach[half], reach[half], q)
        prog.emit("sub.s32", reach[half], reach[half], q)         # limit - start_n - 2q
    for i, ti in enumerate(t):
        past = prog.reg("pred")
        prog.emit("setp.lt.s32", past, reach[acc_row_half(i)], acc_column(i))
        prog.emit("mov.f32", ti, f32(float("-inf")), guard=past)


def emit_quad_reduce(prog: Program, x: Reg, op: str) -> None:
    """x <- op over the four threads of a quad (they hold one row's columns)."""
    other = prog.reg("f32")
    for lane_mask in (1, 2):
        prog.emit("shfl.bfly", other, x, lane_mask)
        prog.emit(op, x, x, other)


def emit_band_mask(prog: Program, c: Cta, rows: Rows, s: list[Reg], start_n: Reg, tag: str) -> None:
    """Mask the scores ``s`` of the block at ``start_n`` if it lies in the masked band."""
    if rows.left_end is not None:                          # a window's left band too
        return emit_window_band_mask(prog, c, rows, s, start_n, tag)
    unmasked = prog.reg("pred")
    prog.emit("setp.lt.u32", unmasked, start_n, rows.band_start)
    prog.emit("bra", f"SCORES_READY{tag}", guard=unmasked)
    emit_mask(prog, c, rows, s, start_n)
    prog.label(f"SCORES_READY{tag}")


def emit_row_max(prog: Program, s: list[Reg], fac: Reg, half: int, m: Reg, masked: bool = True,
                 floor: bool = True) -> None:
    """m = max(S) c over the thread's row ``half`` and its quad (c > 0: rounding is monotone,
    so max(S c) = max(S) c), -inf for a fully masked row, at least NEG_FLOOR (``floor`` False:
    not floored, for a caller that takes max(A, m) with A >= NEG_FLOOR next). Unmasked
    blocks (``masked`` False) have no -inf score (E4M3 has no infinity), so no guard there."""
    emit = prog.emit
    regs = [si for i, si in enumerate(s) if acc_row_half(i) == half]
    emit("max.nan.f32", m, regs[0], regs[1])
    for si in regs[2:]:
        emit("max.nan.f32", m, m, si)
    emit_quad_reduce(prog, m, "max.nan.f32")
    if masked:
        all_masked = prog.reg("pred")
        emit("setp.eq.f32", all_masked, m, f32(float("-inf")))
    emit("mul.f32", m, m, fac)
    if masked:
        emit("mov.f32", m, f32(float("-inf")), guard=all_masked)   # -inf * 0 would be NaN
    if floor:
        emit("max.nan.f32", m, m, f32(NEG_FLOOR))


def emit_block(prog: Program, c: Cta, rows: Rows, rule: str, j: Reg, start_n: Reg, s: list[Reg],
               d_ones: Reg | None, total: list[Reg], A: list[Reg], l: list[Reg], tag: str = "",
               masked: bool = True, deferred: bool = False, facs: list[Reg] | None = None,
               running: bool = False) -> None:
    """One key block from its scores ``s`` (complete): the softmax, P V^T (waited for, with
    any wgmma still in flight), accumulation. ``masked`` False: a block below the band.
    ``running``: the running-max reference (module docstring); ``deferred`` does not apply.
    ``deferred``: the reference update in a warp-uniform branch taken only when a row's
    maximum passed A + RESCALE_THRESHOLD (emit_reference_moves). ``facs``: the two rows'
    factors (int8_qk), else the head's rows.fac."""
    _, v_tile, _, _ = stage(prog, c, j)
    dvs = [emit_descriptor(prog, part) for part in v_halves(prog, v_tile, len(total))]
    sm = emit_softmax(prog, c, rows, rule, start_n, s, d_ones, A, tag, masked=masked,
                      deferred=deferred and not running, facs=facs, running=running)
    if running:                                            # P V^T into the rescaled total
        emit_rescale(prog, total, sm.alpha, tag)
        for half, dv in enumerate(dvs):
            emit_pv_issue(prog, c, sm.p_regs, dv, into=total[half * ACC:(half + 1) * ACC])
        prog.emit("wgmma.wait", 0)
        emit_row_update(prog, sm, l, A)
        return
    for half, dv in enumerate(dvs):                        # Dv 256: two P V^T in turn
        o = emit_pv_issue(prog, c, sm.p_regs, dv)
        prog.emit("wgmma.wait", 0)
        if half == 0:
            prog.comment("total = total * alpha + block * beta; the multiply only when a reference moved")
            if deferred:
                emit_reference_moves(prog, sm, total, A, l, tag)
            else:
                emit_rescale(prog, total, sm.alpha, tag)
        emit_fold(prog, o, total[half * ACC:(half + 1) * ACC], sm.beta)
    emit_row_update(prog, sm, l, A)


def emit_reference_moves(prog: Program, sm: Softmax, total: list[Reg] | None, A: list[Reg], l: list[Reg],
                         tag: str, alpha: list[Reg] | None = None) -> None:
    """Where a row's maximum m passed A + RESCALE_THRESHOLD (rare after the first blocks; a
    branch the whole warp takes or skips): its reference moves to m, alpha = 2^(A - m) scales
    the total and l, and the block's factor beta becomes 1; the other rows keep A, alpha = 1,
    beta = 2^(m - A). The same numbers as every block's alpha and beta (2^0 is 1 exactly).
    ``total`` None: the total's factor is left in ``alpha`` (which the caller set to 1) for
    a fold that comes later (the pipelined consumer folds block j - 1 first)."""
    emit = prog.emit
    either, any_moved = prog.regs("pred", 2)
    emit("or.pred", either, sm.moved[0], sm.moved[1])
    emit("vote.any", any_moved, either)
    emit("bra", f"REFERENCES_KEPT{tag}", guard=f"!{any_moved}")
    alpha = alpha or prog.regs("f32", 2)
    for half in (0, 1):
        diff = prog.reg("f32")
        emit("sub.f32", diff, A[half], sm.m[half])
        emit("ex2.f32", alpha[half], diff)
        emit("selp.f32", alpha[half], alpha[half], f32(1.0), sm.moved[half])
        emit("selp.f32", sm.beta[half], f32(1.0), sm.beta[half], sm.moved[half])
        emit("mul.f32", l[half], l[half], alpha[half])
        emit("selp.f32", A[half], sm.m[half], A[half], sm.moved[half])
    emit_scale_rows(prog, total or [], alpha)
    prog.label(f"REFERENCES_KEPT{tag}")


def v_halves(prog: Program, v_tile: Reg, n_total: int) -> list[Reg]:
    """The V^T tile's parts of 128 rows (Dv 256: two, 16 KB apart), one P V^T each."""
    parts = [v_tile]
    for half in range(1, n_total // ACC):
        part = prog.reg("u32")
        prog.emit("add.u32", part, v_tile, half * HEAD_DIM * BLOCK_N)    # 128 rows of 128 bytes
        parts.append(part)
    return parts


def emit_row_update(prog: Program, sm: Softmax, l: list[Reg], A: list[Reg]) -> None:
    """l = l * alpha + l_blk * beta; the reference moves to A_new. A deferred softmax (no
    alpha, no A_new): emit_reference_moves scaled l and moved A already, l += l_blk * beta.
    A running one (no beta): l = l * alpha + l_blk."""
    for half in (0, 1):
        if sm.beta is None:                                # running: beta is 1
            prog.emit("fma.f32", l[half], l[half], sm.alpha[half], sm.l_blk[half])
        else:
            if sm.alpha is not None:
                prog.emit("mul.f32", l[half], l[half], sm.alpha[half])
            prog.emit("fma.f32", l[half], sm.l_blk[half], sm.beta[half], l[half])
        if sm.A_new is not None:
            prog.emit("mov.f32", A[half], sm.A_new[half])


def emit_softmax(prog: Program, c: Cta, rows: Rows, rule: str, start_n: Reg, s: list[Reg], d_ones: Reg | None,
                 A: list[Reg], tag: str = "", wait_rowsum: bool = True, masked: bool = True,
                 deferred: bool = False, facs: list[Reg] | None = None, running: bool = False) -> Softmax:
    """Mask (in place, in the blocks that need it), row max, references, P codes packed into
    the A operand, row sums of the rounded P (HMMA_RULES: issued as a wgmma group against
    the ones tile at descriptor ``d_ones``, waited for unless ``wait_rowsum`` is False).
    ``masked`` False: the caller knows the block lies below the band (no test, no mask).
    ``facs``: the two rows' factors (>= 0 or NaN; int8_qk), else the head's rows.fac.
    ``running``: the reference is the running max A_new = max(A, m) (no threshold), P's too."""
    emit = prog.emit
    facs = facs or [rows.fac, rows.fac]
    if masked:
        emit_band_mask(prog, c, rows, s, start_n, tag)

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
        emit_row_max(prog, s, facs[half], half, m[half], masked)
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
    """y = S c - r (r = -neg_m), the P codes packed into the A operand and the row sums of
    the rounded P; the Softmax record with the reference's registers."""
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
    if rule == "exact":                # P = 2^(y + 8): the offset folded into the FFMA's addend
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
    for t in range(BLOCK_N // 16):
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
    pairs = {i: emit_p_exact_pair(prog, ys[i], ys[i + 1], exps) for i in range(0, ACC, 2)}
    p_regs, p16 = [], {}
    for k in range(BLOCK_N // 32):
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
    for i in range(0, ACC, 2):
        w = pairs[i] = emit_p_code_pair(prog, ys[i], ys[i + 1], consts, rule)
        masked = p16[i] = prog.reg("b32")
        prog.emit("and.b32", masked, w, "0x00FF00FF")
        prog.emit("shl.b32", masked, masked, 7)
    p_regs = [[emit_pack_pairs(prog, pairs[src[0]], pairs[src[2]]) for src in p_sources(k)]
              for k in range(BLOCK_N // 32)]
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
    return [[emit_pack4(prog, [codes[r] for r in src]) for src in p_sources(k)] for k in range(BLOCK_N // 32)]


def emit_rescale(prog: Program, total: list[Reg], alpha: list[Reg], tag: str) -> None:
    """total *= alpha, only when some row's reference moved (alpha != 1)."""
    emit = prog.emit
    keep = prog.regs("pred", 2)
    for half in (0, 1):
        emit("setp.neu.f32", keep[half], alpha[half], f32(1.0))
    either = prog.reg("pred")
    emit("or.pred", either, keep[0], keep[1])
    emit("bra.div", f"RESCALED{tag}", guard=f"!{either}")
    emit_scale_rows(prog, total, alpha)
    prog.label(f"RESCALED{tag}")


def emit_scale_rows(prog: Program, total: list[Reg], alpha: list[Reg]) -> None:
    """total *= alpha, each accumulator register by its row half's factor."""
    for i, ti in enumerate(total):
        prog.emit("mul.f32", ti, ti, alpha[acc_row_half(i)])


def emit_pv_issue(prog: Program, c: Cta, p_regs: list[list[Reg]], dv: Reg, into: list[Reg] | None = None) -> list[Reg]:
    """Issue (and commit) block = P V^T (128 columns, or Dv 64's 64) into a fresh accumulator,
    which it returns; ``into``: added to those registers instead (the running reference)."""
    emit = prog.emit
    n = min(c.layout.dv, HEAD_DIM)
    prog.comment("P V^T added to the total" if into else "block columns 0.. = P V^T in a fresh accumulator")
    o = into or prog.regs("f32", n // 2)
    o_list = ", ".join(map(str, o))
    emit("wgmma.fence")
    for k in range(BLOCK_N // 32):
        bk = prog.reg("u64")
        emit("add.u64", bk, dv, 2 * k)
        first = k == 0 and not into
        emit(f"wgmma.m64n{n}k32.e4m3.rs", o_list, ", ".join(map(str, p_regs[k])), bk, 0 if first else c.accumulate)
    emit("wgmma.commit")
    return o


def emit_fold(prog: Program, o: list[Reg], total: list[Reg], beta: list[Reg]) -> None:
    """total += block * beta (the total already multiplied by alpha)."""
    for i, (oi, ti) in enumerate(zip(o, total)):
        prog.emit("fma.f32", ti, oi, beta[acc_row_half(i)], ti)
