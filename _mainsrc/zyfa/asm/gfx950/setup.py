"""The attention kernel's set-up, before the loop over key blocks: the arguments and this
workgroup's slices of every tensor, a lane's coordinates and the query limits, Q's operand,
and the registers and constants of the block loop (the LDS layout is ``lds``'s, the running
state ``total``'s).

A workgroup is 256 queries of one head (grid: query tiles, heads, batch); its kv head and
factor c come from device tables. Lane l of wave w holds query 32 w + l % 32; lanes l and
l ^ 32 share a query and split its keys."""
from __future__ import annotations

from ..program import Program, Reg
from .lean_p import PACK_HALVES, PACK_PAIR, load_constants
from .state import Args, Kernel, Lanes, Lds, Products, QOperand, Running, Scores, Softmax
from .target import lit, span
from .variant import BLOCK_N, E4M3_ONES, E8M0_ONE, GROUP_WAVES, NEG_INF, QUERIES, WAVES, Variant


def add_product(prog: Program, ptr: list[Reg], x, y, lo: Reg, hi: Reg) -> None:
    """ptr (a 64-bit SGPR pair) += x * y, the product taken to 64 bits in lo, hi."""
    prog.emit("s_mul_i32", lo, x, y)
    prog.emit("s_mul_hi_u32", hi, x, y)
    prog.emit("s_add_u32", ptr[0], ptr[0], lo)
    prog.emit("s_addc_u32", ptr[1], ptr[1], hi)


def emit_arguments(prog: Program, v: Variant) -> Args:
    """Load the arguments; offset every pointer to this workgroup's head."""
    emit = prog.emit
    kernarg = prog.aligned("s", 2)
    wg, head, batch = prog.regs("s", 3)                          # workgroup ids: query tile, head, batch
    ptrs = prog.aligned("s", 8, 4)                               # q, k, vt, vd
    outs = prog.aligned("s", 8, 4)                               # out, lse, fac, kv_head
    sq, sk, hq, hkv = prog.aligned("s", 4, 4)
    fac, kvh, bh, bkv, lo, hi = prog.regs("s", 6)
    (tid,) = prog.regs("v", 1)
    emit("s_load_dwordx8", span(ptrs), span(kernarg), 0)
    emit("s_load_dwordx8", span(outs), span(kernarg), 32)
    emit("s_load_dwordx4", span([sq, sk, hq, hkv]), span(kernarg), 64)
    fac_ptr, kv_ptr = span(outs[4:6]), span(outs[6:8])

    def add(ptr, x, y):
        add_product(prog, ptr, x, y, lo, hi)

    prog.comment("this workgroup's head: its kv head and factor c from tables, its slices of every tensor")
    emit("s_waitcnt_lgkm")
    emit("s_mul_i32", bh, batch, hq)
    emit("s_add_u32", bh, bh, head)                              # batch * Hq + head
    emit("s_lshl_b32", lo, head, 2)
    emit("s_load_dword", kvh, kv_ptr, lo)
    emit("s_lshl_b32", lo, bh, 2)
    emit("s_load_dword", fac, fac_ptr, lo)
    emit("s_waitcnt_lgkm")
    emit("s_mul_i32", bkv, batch, hkv)
    emit("s_add_u32", bkv, bkv, kvh)                             # batch * Hkv + kv head
    q_stride, k_stride, o_stride, n, const = prog.regs("s", 5)   # bytes between rows; scratch
    emit("s_mul_i32", q_stride, hq, v.head_dim)
    emit("s_mul_i32", k_stride, hkv, v.head_dim)
    emit("s_mul_i32", o_stride, hq, 4 * v.value_dim)
    emit("s_mul_i32", n, batch, sq)
    add(ptrs[0:2], n, q_stride)                                  # q += (b Sq) (Hq D) + h D
    emit("s_mov_b32", const, v.head_dim)
    add(ptrs[0:2], head, const)
    emit("s_mul_i32", n, batch, sk)
    add(ptrs[2:4], n, k_stride)                                  # k += (b Sk) (Hkv D) + kvh D
    add(ptrs[2:4], kvh, const)
    emit("s_mul_i32", n, batch, sq)
    add(outs[0:2], n, o_stride)                                  # out += (b Sq) (Hq Dv 4) + h Dv 4
    emit("s_mov_b32", const, 4 * v.value_dim)
    add(outs[0:2], head, const)
    add(ptrs[6:8], bh, const)                                    # vd += (b Hq + h) Dv 4
    emit("s_lshl_b32", n, sq, 2)
    add(outs[2:4], bh, n)                                        # lse += (b Hq + h) Sq 4
    return Args(ptrs, outs, wg, tid, sq, sk, fac, bkv, q_stride, k_stride, o_stride, n, lo, hi)


def emit_coordinates(prog: Program, v: Variant, a: Args) -> Lanes:
    """Lane coordinates, the query limits (causal: bottom-right), the number of key blocks and
    the first that needs a mask; V^T's pointer to this kv head."""
    emit = prog.emit
    prog.comment("lane coordinates, query limits, the number of key blocks")
    s_tiles = [prog.aligned("v", 16, 2) for _ in range(2)]       # scores: free before the loop, so
    qload, qoff, t32, wave = s_tiles[1][4:8]                     # the prologue's temporaries live there
    row, half, t16, query, partner, limit, neg_inf, lane, w16 = prog.regs("v", 9)
    q0, sk_last, n_blocks, skp, tmp, group = prog.regs("s", 6)
    emit("v_and_b32", row, 31, a.tid)
    emit("v_and_b32", lane, 63, a.tid)
    emit("v_lshrrev_b32", half, 5, lane)
    emit("v_lshlrev_b32", t16, 4, half)
    emit("v_lshrrev_b32", wave, 6, a.tid)                        # the wave within the workgroup
    emit("v_lshrrev_b32", w16, 2, wave)
    emit("v_readfirstlane_b32", group, w16)                      # its group, 0 or 1 (wave-uniform)
    emit("v_and_b32", w16, GROUP_WAVES - 1, wave)
    emit("v_lshlrev_b32", w16, 4, w16)                           # its 16-byte column when staging
    emit("v_xor_b32", partner, 32, a.tid)
    emit("v_and_b32", partner, 63, partner)
    emit("v_lshlrev_b32", partner, 2, partner)                   # ds_bpermute address of lane l ^ 32
    emit("v_mov_b32", neg_inf, lit(NEG_INF))
    emit("s_lshl_b32", q0, a.wg, 8)                              # first query of the workgroup
    emit("v_lshl_add_u32", query, wave, 5, row)                  # + 32 wave + row
    emit("v_add_u32", query, q0, query)
    emit("s_add_u32", sk_last, a.sk, -1 & 0xFFFFFFFF)
    emit("s_add_u32", tmp, a.sq, -1 & 0xFFFFFFFF)
    emit("v_min_u32", qload, tmp, query)                         # rows past seqlen_q load the last row
    if v.causal:
        emit("s_sub_u32", tmp, a.sk, a.sq)                       # bottom-right: query i sees keys <= i + Sk - Sq
        emit("v_add_u32", limit, tmp, query)
        emit("v_min_u32", limit, sk_last, limit)
        emit("s_add_u32", n_blocks, q0, QUERIES * WAVES)        # keys needed: min(q0 + 256 + Sk - Sq, Sk)
        emit("s_add_u32", n_blocks, n_blocks, tmp)
        emit("s_min_u32", n_blocks, n_blocks, a.sk)
    else:
        emit("v_mov_b32", limit, sk_last)
        emit("s_mov_b32", n_blocks, a.sk)
    emit("s_add_u32", n_blocks, n_blocks, BLOCK_N - 1)
    emit("s_lshr_b32", n_blocks, n_blocks, 6)
    band = prog.reg("s")                                         # blocks from here on need a mask
    emit("s_and_b32", band, a.sk, -BLOCK_N & 0xFFFFFFFF)
    if v.causal:
        emit("s_add_u32", tmp, tmp, q0)                          # q0 + Sk - Sq + 1: keys below are seen by all
        emit("s_add_u32", tmp, tmp, 1)
        emit("s_and_b32", tmp, tmp, -BLOCK_N & 0xFFFFFFFF)
        emit("s_min_u32", band, band, tmp)
    emit("s_add_u32", skp, a.sk, BLOCK_N - 1)
    emit("s_and_b32", skp, skp, -BLOCK_N & 0xFFFFFFFF)           # V^T row stride: Sk padded to 64
    emit("s_mul_i32", a.n, skp, v.value_dim)
    add_product(prog, a.ptrs[4:6], a.bkv, a.n, a.lo, a.hi)       # vt += (b Hkv + kvh) Dv Sk_padded
    return Lanes(s_tiles, qload, qoff, t32, row, half, t16, lane, w16, query, partner, limit, neg_inf, group,
                 q0, sk_last, n_blocks, band, skp, tmp)


def emit_q(prog: Program, v: Variant, a: Args, ln: Lanes) -> QOperand:
    """Load Q as the B operand of S^T = K Q^T: byte j of lane l is query l % 32, dim
    32 (j // 16) + 16 (l // 32) + j % 16 of each 64-dim slice (the MFMA's layout)."""
    emit = prog.emit
    prog.comment("Q as the B operand of S^T = K Q^T, one 8-register slice per 64 head dims")
    (dim,) = prog.regs("s", 1)
    emit("s_mov_b32", dim, v.head_dim)
    emit("v_mad_u32_u24", ln.qoff, ln.qload, a.q_stride, ln.t16)  # row * Hq D + 16 half
    qb = [prog.aligned("v", 8, 2) for _ in range(v.chunks)]
    for dc, regs in enumerate(qb):
        emit("global_load_dwordx4_at", span(regs[:4]), ln.qoff, a.pointer(0), 64 * dc)
        emit("global_load_dwordx4_at", span(regs[4:]), ln.qoff, a.pointer(0), 64 * dc + 32)
    return QOperand(dim, qb)


def emit_constants(prog: Program, v: Variant, a: Args, ln: Lanes, q: QOperand, lds: Lds, running: Running) -> Kernel:
    """The block loop's registers, in the order that numbers them, and its constants: the lean
    rule's, v_perm's selectors, E4M3 ones, the E8M0 scale of 1 and c twice."""
    emit = prog.emit
    consts = load_constants(prog, v.rule)
    sel_pair, sel_halves = prog.regs("s", 2)
    emit("s_mov_b32", sel_pair, lit(PACK_PAIR))
    emit("s_mov_b32", sel_halves, lit(PACK_HALVES))
    ka = [prog.aligned("v", 8, 2) for _ in range(v.chunks)]
    kbase, kvalid = prog.regs("v", 2)
    m, other, a_new, alpha, beta = prog.regs("v", 5)
    y, c_pair, neg_r_pair, alpha_pair, beta_pair = (prog.aligned("v", 2, 2) for _ in range(5))
    ones = prog.aligned("v", 8, 2)
    for reg in ones:
        emit("v_mov_b32", reg, lit(E4M3_ONES))
    pb = prog.aligned("v", 8, 2)
    va = prog.aligned("v", 8, 2)
    # the softmax's temporaries live in the matrix operands' registers (K and V^T operands are
    # dead in the vector phase) when those are enough: it is what lets MLA's 192 fit
    pool = [r for regs in ka for r in regs] + va
    if len(pool) >= 16:
        scratch, quad = [pool[2 * i:2 * i + 2] for i in range(6)], pool[12:16]
    else:
        scratch, quad = [prog.aligned("v", 2, 2) for _ in range(6)], prog.aligned("v", 4, 2)
    p_scale, one_scale = prog.regs("v", 2)                       # E8M0 scale bytes (scales live in VGPRs)
    emit("v_mov_b32", one_scale, E8M0_ONE)
    for reg in c_pair:
        emit("v_mov_b32", reg, a.fac)
    return Kernel(prog, v, a, ln, lds, running,
                  Scores(ln.s_tiles, q.slices, ka, kbase, kvalid),
                  Softmax(consts, sel_pair, sel_halves, m, other, a_new, alpha, beta, y, c_pair, neg_r_pair,
                          alpha_pair, beta_pair, scratch, quad),
                  Products(ones, pb, va, p_scale, one_scale))
