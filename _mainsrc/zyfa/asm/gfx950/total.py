"""The total stage: the running state across key blocks, its rescale and the accumulation.

total holds O^T per 32 value columns, l the row sums, A the lazy reference. block: each
block's fresh P.V result joins them as total += O beta, l += rowsum beta with
beta = 2^(m - A'); block_pow2: the scaled MFMA already added it (``pv``), and total and l
live in AGPRs, where only the matrix cores add to them. Both: total and l are multiplied by
alpha only when some lane's A moved (alpha = 1 exactly otherwise)."""
from __future__ import annotations

from ...spec.constants import NEG_FLOOR
from ..program import Program, Reg
from .state import Kernel, Running
from .target import lit, span
from .variant import Variant, emit_mfma_wait

RESCALE_SKIP = ".Lrescaled"  # the branch past the rescale when no lane's reference moved


def emit_running_state(prog: Program, v: Variant) -> Running:
    """total, l and A, zeroed (A: the floor)."""
    emit = prog.emit
    prog.comment("running state: total (O^T per value tile), row sum l, reference A; block_pow2 keeps")
    prog.comment("total and the row sums in AGPRs, where only the matrix cores add to them")
    acc = "a" if v.pow2 else "v"
    total = [prog.aligned(acc, 16, 2) for _ in range(v.dv_tiles)]
    o = prog.aligned(acc, 16, 2)              # block: P.V's fresh accumulator and the row sums;
    l_sum = o[0] if v.pow2 else prog.reg("v")  # block_pow2: the running row sums (every row the sum)
    for reg in [r for tile in total for r in tile] + (o if v.pow2 else [l_sum]):
        emit("v_accvgpr_write_b32" if v.pow2 else "v_mov_b32", reg, 0)
    (A,) = prog.regs("v", 1)
    emit("v_mov_b32", A, lit(NEG_FLOOR))
    return Running(total, o, l_sum, A)


def emit_fold_row_sums(k: Kernel) -> None:
    """block: l += the row-sum MFMA's result times beta."""
    emit_mfma_wait(k.prog)
    k.emit("v_fmac_f32", k.running.l_sum, k.running.o[0], k.soft.beta)


def emit_fold(k: Kernel, tile: list[Reg]) -> None:
    """block: a value tile of total += the fresh P.V result O times beta."""
    o, beta_pair = k.running.o, k.soft.beta_pair
    emit_mfma_wait(k.prog)
    for t in range(0, 16, 2):                                    # two elements an instruction
        k.emit("v_pk_fma_f32", span(tile[t:t + 2]), span(o[t:t + 2]), span(beta_pair), span(tile[t:t + 2]))


def emit_rescale(k: Kernel) -> None:
    """total and l *= alpha when some lane's reference moved; then beta as a pair for the folds."""
    emit, s, run = k.emit, k.soft, k.running
    k.prog.comment("total and l *= alpha, skipped when no lane's reference moved (alpha = 1 exactly)")
    emit("v_cmp_neq_f32", 1.0, s.alpha)
    emit("s_cbranch_vccz", RESCALE_SKIP)
    emit("v_mov_b32", s.alpha_pair[0], s.alpha)
    emit("v_mov_b32", s.alpha_pair[1], s.alpha)
    if k.v.pow2:                                                 # AGPRs: through a VGPR pair (rare)
        work = s.scratch[0]
        for pair in [[run.l_sum, run.o[1]]] + [tile[t:t + 2] for tile in run.total for t in range(0, 16, 2)]:
            for src, dst in zip(pair, work):
                emit("v_accvgpr_read_b32", dst, src)
            emit("v_pk_mul_f32", span(work), span(work), span(s.alpha_pair))
            for src, dst in zip(work, pair):
                emit("v_accvgpr_write_b32", dst, src)
    else:
        emit("v_mul_f32", run.l_sum, run.l_sum, s.alpha)
        for tile in run.total:
            for t in range(0, 16, 2):
                emit("v_pk_mul_f32", span(tile[t:t + 2]), span(tile[t:t + 2]), span(s.alpha_pair))
    k.prog.label(RESCALE_SKIP)
    if not k.v.pow2:
        emit("v_mov_b32", s.beta_pair[0], s.beta)
        emit("v_mov_b32", s.beta_pair[1], s.beta)
