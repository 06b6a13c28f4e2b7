"""One key block in the generated Hopper kernel, put together: the scores (scores.py), the
softmax (softmax.py), P V^T into a fresh accumulator and the two-level accumulation
(zyfa.spec.reference.fp8_attention_spec's block step). Each schedule issues and waits for
these pieces in its own order.

``running`` (ref_rule "running", the fast mode): FlashAttention's running max is every block's
reference, so P V^T accumulates straight into the total (rescaled first where a row's max
moved): no fresh accumulator and no fold, 64 registers and 64 FFMAs a block fewer."""
from __future__ import annotations

from ...spec.constants import NEG_FLOOR
from ..program import Program, Reg
from .cta import Cta, Rows
from .fragments import acc_row_half
from .layout import COLUMN_TILE, HEAD_DIM, OUT_REGS
from .loads import stage
from .smem import emit_descriptor
from .softmax import Softmax, emit_softmax
from .target import f32



# the block loop is emitted twice (serial.py, the pipelined consumer of specialized.py): the
# blocks below the masked band (no mask test, no guard for fully masked rows), then the band's;
# (label tag, masked) of each copy
BLOCK_LOOPS = (("_BELOW", False), ("", True))


BLOCK_LOOP_COPIES = len(BLOCK_LOOPS)


def emit_accumulators(prog: Program, n: int = OUT_REGS) -> tuple[list[Reg], list[Reg], list[Reg]]:
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
    dvs = [emit_descriptor(prog, part) for part in v_halves(prog, v_tile, len(total), c.layout.block_n)]
    sm = emit_softmax(prog, c, rows, rule, start_n, s, d_ones, A, tag, masked=masked,
                      deferred=deferred and not running, facs=facs, running=running)
    if running:                                            # P V^T into the rescaled total
        emit_rescale(prog, total, sm.alpha, tag)
        for half, dv in enumerate(dvs):
            emit_pv_issue(prog, c, sm.p_regs, dv, into=total[half * OUT_REGS:(half + 1) * OUT_REGS])
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
        emit_fold(prog, o, total[half * OUT_REGS:(half + 1) * OUT_REGS], sm.beta)
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


def v_halves(prog: Program, v_tile: Reg, n_total: int, block_n: int) -> list[Reg]:
    """The V^T tile's parts of 128 rows (Dv 256: two, 16 KB apart), one P V^T each."""
    parts = [v_tile]
    for half in range(1, n_total // OUT_REGS):
        part = prog.reg("u32")
        prog.emit("add.u32", part, v_tile, half * HEAD_DIM * block_n)    # 128 rows of block_n bytes
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


def emit_pv_issue(prog: Program, c: Cta, p_regs: list[list[Reg]], dv: Reg, into: list[Reg] | None = None,
                  fresh: list[Reg] | None = None) -> list[Reg]:
    """Issue (and commit) block = P V^T (128 columns, or Dv 64's 64) into a fresh accumulator
    (``fresh``: those registers), which it returns; ``into``: added to those registers instead
    (the running reference)."""
    emit = prog.emit
    n = min(c.layout.dv, HEAD_DIM)
    prog.comment("P V^T added to the total" if into else "block columns 0.. = P V^T in a fresh accumulator")
    o = into or fresh or prog.regs("f32", n // 2)
    o_list = ", ".join(map(str, o))
    emit("wgmma.fence")
    box_step = COLUMN_TILE * c.layout.dv >> 4                 # descriptor units (16 bytes) a V^T box
    for k in range(c.layout.p_steps):
        bk = prog.reg("u64")
        box, step = divmod(k, COLUMN_TILE // 32)              # 32 keys a k-step, four a 128-key box
        emit("add.u64", bk, dv, box * box_step + 2 * step)
        first = k == 0 and not into
        emit(f"wgmma.m64n{n}k32.e4m3.rs", o_list, ", ".join(map(str, p_regs[k])), bk, 0 if first else c.accumulate)
    emit("wgmma.commit")
    return o


def emit_fold(prog: Program, o: list[Reg], total: list[Reg], beta: list[Reg]) -> None:
    """total += block * beta (the total already multiplied by alpha)."""
    for i, (oi, ti) in enumerate(zip(o, total)):
        prog.emit("fma.f32", ti, oi, beta[acc_row_half(i)], ti)
