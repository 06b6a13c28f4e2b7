"""The P stage of one key block: row max, references, lean P codes.

  m        row max over the lane's 32 keys and its partner's (l ^ 32, ds_bpermute); t = S c
           is monotone in S for c > 0, so m = max(S) c
  A, alpha the lazy reference (moves when m > A + 8) and alpha = 2^(A - A')
  r        the block's P reference: ref_rule "block" r = m (and beta = 2^(m - A') for the
           total stage); "block_pow2" r = A' - d with d = floor(A' - m), so the block's weight
           2^(r - A') is 2^-d, applied by the P.V MFMA's E8M0 scale 127 - d (clamped at 0)
  P        lean-rule codes of y = fma(S, c, -r), two scores an instruction, packed with v_perm
           straight into the B operand of P.V (byte j: tile j // 16, register j % 16; V^T's
           keys permuted on the host to match, zyfa.spec.key_order.gfx950_vt)

The spec's block_pow2 weight is 2^(r - A') of the float32 r; it equals 2^-d unless A' - d
rounds (|A'| small and d large), and then differs by under 2^-17 relative: inside the
float32 accumulation noise the tests allow."""
from __future__ import annotations

from ...spec.constants import NEG_FLOOR, RESCALE_THRESHOLD
from .lean_p import emit_p_codes
from .state import Kernel
from .target import lit, span
from .variant import E8M0_ONE


def emit_references(k: Kernel) -> None:
    """m, A' and alpha, and the block's reference r (as -r); block_pow2: P's scale byte."""
    emit, s, scores, A = k.emit, k.soft, k.scores.values, k.running.A
    m, other = s.m, s.other
    k.prog.comment(f"row max m = max(S) c, lazy reference A, the block's reference r ({k.v.ref_rule})")
    emit("v_max3_f32", m, scores[0], scores[1], scores[2])
    for j in range(3, len(scores), 2):                           # three-input max: half the instructions
        emit("v_max3_f32", m, m, scores[j], scores[j + 1]) if j + 1 < len(scores) else emit("v_max_f32", m, m, scores[j])
    emit("ds_bpermute_b32", other, k.lanes.partner, m)
    emit("s_waitcnt_lgkm")
    emit("v_max_f32", m, m, other)
    emit("v_mul_f32", m, k.args.fac, m)
    emit("v_max_f32", m, lit(NEG_FLOOR), m)                      # all-masked rows keep the floor
    thr = other                                                  # the partner's max is dead by then
    emit("v_add_f32", thr, lit(RESCALE_THRESHOLD), A)
    emit("v_cmp_gt_f32", m, thr)
    emit("v_cndmask_b32", s.a_new, A, m)                         # m > A + 8 ? m : A
    emit("v_sub_f32", s.alpha, A, s.a_new)
    emit("v_exp_f32", s.alpha, s.alpha)
    emit("v_mov_b32", A, s.a_new)
    neg_r, p_scale = s.neg_r_pair[0], k.products.p_scale
    if k.v.pow2:
        d = s.beta                                               # no beta: the MFMA applies 2^-d
        emit("v_sub_f32", d, s.a_new, m)
        emit("v_floor_f32", d, d)
        emit("v_sub_f32", neg_r, d, s.a_new)                     # -r = d - A' (the spec's A' - d, negated exactly)
        emit("v_cvt_i32_f32", p_scale, d)                        # saturates: masked rows' huge d -> INT_MAX
        emit("v_sub_u32", p_scale, E8M0_ONE, p_scale)
        emit("v_max_i32", p_scale, 0, p_scale)                   # weights below 2^-127: 2^-127 (negligible)
    else:
        emit("v_sub_f32", s.beta, m, s.a_new)
        emit("v_exp_f32", s.beta, s.beta)
        emit("v_mul_f32", neg_r, "-1.0", m)


def emit_codes(k: Kernel) -> None:
    """P's codes of y = fma(S, c, -r), four scores' packed into each register of the B operand."""
    emit, s, scores = k.emit, k.soft, k.scores.values
    k.prog.comment(f"P codes ({k.v.rule}) of y = fma(S, c, -r), two scores an instruction, into the B operand")
    emit("v_mov_b32", s.neg_r_pair[1], s.neg_r_pair[0])
    lo, hi = s.y                                                 # y is dead once a quad's codes are made
    for i, dst in enumerate(k.products.p):
        for q2 in (0, 1):
            pair = scores[4 * i + 2 * q2:4 * i + 2 * q2 + 2]
            emit("v_pk_fma_f32", span(s.y), span(pair), span(s.c_pair), span(s.neg_r_pair))
            emit_p_codes(k.prog, s.y, k.v.rule, s.consts, out=s.quad[2 * q2:2 * q2 + 2], scratch=s.scratch)
        emit("v_perm_b32", lo, s.quad[1], s.quad[0], s.sel_pair)
        emit("v_perm_b32", hi, s.quad[3], s.quad[2], s.sel_pair)
        emit("v_perm_b32", dst, hi, lo, s.sel_halves)
