"""The scores stage: S^T = K Q^T for one key block and the mask.

Per 32-key tile, D / 64 v_mfma_f32_32x32x64_f8f6f4 with K (from LDS) as the A operand and Q
as the B operand, so lane l holds query l % 32 and keys 32 t + 8 (r // 4) + 4 (l // 32) + r % 4
in register r of tile t (zyfa.spec.key_order.key_of_byte orders V^T to match). The mask sets
keys past seqlen_k or past the bottom-right causal limit to -inf; only blocks from ``band`` on
(the diagonal band and the key tail) run it."""
from __future__ import annotations

from .state import Kernel
from .target import span

MASK_SKIP = ".Lmasked"       # the branch past the mask that blocks below the band take


def emit_scores(k: Kernel) -> None:
    """S^T = K_j Q^T, K_j from the LDS buffer of parity kb & 1."""
    emit, L, sc, d = k.emit, k.lds, k.scores, k.v.head_dim
    emit("s_and_b32", k.lanes.tmp, L.kb, 1)
    emit("s_mul_i32", L.buf, k.lanes.tmp, k.v.k_bytes)
    emit("v_add_u32", L.addr, L.buf, L.k_read)
    for tile, st in enumerate(sc.tiles):
        for dc, regs in enumerate(sc.k):
            emit("ds_read_b128_at", span(regs[:4]), L.addr, 32 * d * tile + 64 * dc)
            emit("ds_read_b128_at", span(regs[4:]), L.addr, 32 * d * tile + 64 * dc + 32)
        emit("s_waitcnt_lgkm")
        for dc in range(k.v.chunks):
            emit("v_mfma_f32_32x32x64_f8f6f4", span(st), span(sc.k[dc]), span(sc.q[dc]), span(st) if dc else 0)


def emit_mask(k: Kernel) -> None:
    """Scores whose key is past the query's limit -> -inf (blocks from the band on only)."""
    emit, ln, sc = k.emit, k.lanes, k.scores
    k.prog.comment("mask (diagonal band and key tail only): key > the query's limit -> -inf")
    emit("s_cmp_lt_u32", k.lds.key0, ln.band)
    emit("s_cbranch_scc1", MASK_SKIP)
    emit("v_lshl_add_u32", sc.kbase, ln.half, 2, k.lds.key0)     # the block's first key + 4 half
    for j, sreg in enumerate(sc.values):
        emit("v_add_u32", sc.kvalid, 32 * (j // 16) + 8 * ((j % 16) // 4) + j % 4, sc.kbase)
        emit("v_cmp_gt_u32_vv", sc.kvalid, ln.limit)
        emit("v_cndmask_b32", sreg, sreg, ln.neg_inf)
    k.prog.label(MASK_SKIP)
