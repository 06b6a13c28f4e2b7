"""The epilogue: out = total / l * v_descale and LSE = ln2 (A + log2 l - 8), the 8 being P's
offset (codes are of 2^(y + 8)). Register r of value tile d holds column
32 d + 8 (r // 4) + 4 half + r % 4; rows past seqlen_q store nothing, and one half of each
lane pair stores the LSE."""
from __future__ import annotations

from ...spec.constants import LN2, P_OFFSET_LOG2
from .state import Kernel
from .target import lit, span


def emit_epilogue(k: Kernel) -> None:
    prog, emit, ln, a, run = k.prog, k.emit, k.lanes, k.args, k.running
    pow2, total = k.v.pow2, run.total
    prog.comment("epilogue: out[query, n] = total / l * vd[n]; register r holds n = 32 d + 8 (r // 4) + 4 half + r % 4")
    inv, oo, lg, lse_off, l_final = ln.s_tiles[1][:5]           # the scores are dead by now
    saved = prog.aligned("s", 2)
    vd = ln.s_tiles[0]
    emit("v_accvgpr_read_b32" if pow2 else "v_mov_b32", l_final, run.l_sum)
    l_sum = l_final
    emit("v_rcp_f32", inv, l_sum)
    emit("v_mul_lo_u32", oo, ln.query, a.o_stride)               # query * Hq Dv 4
    emit("v_add_u32", oo, oo, ln.t16)                            # + 16 half bytes (4 half floats)
    emit("v_log_f32", lg, l_sum)
    emit("v_add_f32", lg, lg, run.A)
    emit("v_add_f32", lg, lit(-float(P_OFFSET_LOG2)), lg)
    emit("v_mul_f32", lg, lit(LN2), lg)
    emit("v_lshlrev_b32", lse_off, 2, ln.query)
    emit("v_cmp_gt_u32", a.sq, ln.query)                         # rows past seqlen_q store nothing
    emit("s_and_saveexec_b64", span(saved), "vcc")
    for d, tile in enumerate(total):
        for g in range(4):
            emit("global_load_dwordx4_at", span(vd[4 * g:4 * g + 4]), ln.t16, a.pointer(3), 128 * d + 32 * g)
        if pow2:                                                 # into VGPRs: the product is VALU work
            tile = k.products.p + k.products.v                   # the operands are dead by now
            for src, dst in zip(total[d], tile):
                emit("v_accvgpr_read_b32", dst, src)
        emit("s_waitcnt_vm")
        for r, reg in enumerate(tile):
            emit("v_mul_f32", reg, reg, inv)
            emit("v_mul_f32", reg, reg, vd[r])
        for g in range(4):
            emit("global_store_dwordx4_at", oo, span(tile[4 * g:4 * g + 4]), a.pointer(4), 128 * d + 32 * g)
    emit("v_cmp_eq_u32", 0, ln.half)
    emit("s_and_b64", "exec", "exec", "vcc")
    emit("global_store_dword", lse_off, lg, a.pointer(5))
