"""A building block of the gfx950 attention kernel: one whole FP8 attention block on the
matrix cores, 32 queries x 64 keys, head dim 64, 32 value columns, one wave, for the
spec's per-block algorithm with a single block (``fp8_attention_spec(block_n=64)``).

The transposes keep every query in one lane pair, so nothing goes through LDS:
  S^T = K Q^T        two v_mfma_f32_32x32x64_f8f6f4 (keys 0-31, 32-63); lane l holds query
                     l % 32 and keys 32 t + 8 (r // 4) + 4 (l // 32) + r % 4 in register r
  m   = row max      over the lane's 32 keys, then its partner lane (l ^ 32) by ds_bpermute;
                     t = S c is monotone in S for c > 0, so m = max(S) c
  y   = fma(S, c, -m); P = lean-rule codes (zyfa.asm.gfx950.lean_p); row sum of the rounded P
                     from the codes (shift into a float32, times 2^120), plus the partner's
  O^T = Vp^T P^T     the codes packed with v_perm straight into the B operand (byte j: tile
                     j // 16, register j % 16), so V's keys are permuted to match on the host
                     (``permuted_vt``), as on Hopper
  out = O / l * v_descale, LSE = ln2 (m + log2 l - 8)

Wait states before the MFMAs and before reading their results are conservative counts
(``HAZARD_NOPS``); the emulator does not model them and no MI355X has run this code.
"""
from __future__ import annotations

import numpy as np

from ... import fp8 as F
from .lean_p import LEAN_RULES, emit_p_code, load_constants
from .target import lit, module, program, span

QUERIES, KEYS, HEAD_DIM, VALUE_DIM = 32, 64, 64, 32
LN2 = 0.6931471805599453
HAZARD_NOPS = (15, 1)       # after an MFMA 32x32 before its result is read (as LLVM writes it)
PACK_PAIR, PACK_HALVES = 0x0C0C0400, 0x05040100


def key_of_byte(half: int, j: int) -> int:
    """The key whose P code byte j of a lane in lane-half ``half`` carries."""
    return 32 * (j // 16) + 8 * ((j % 16) // 4) + 4 * half + j % 4


def permuted_vt(v: np.ndarray) -> np.ndarray:
    """(64 keys, 32 value columns) E4M3 bytes -> (32, 64): row n, byte 32 h + j = v[key_of_byte(h, j), n],
    the bytes the lanes of half h load for value column n."""
    out = np.empty((VALUE_DIM, KEYS), np.uint8)
    for h in (0, 1):
        for j in range(32):
            out[:, 32 * h + j] = v[key_of_byte(h, j)]
    return out


def attention_block_kernel(rule: str = "lean_cubic") -> tuple[str, str]:
    """(name, assembly) of zyfa_attn_block_gfx950_<rule>(q, k, vt, vd, out, lse, c):
    q (32 x 64), k (64 x 64) E4M3 row-major, vt = permuted_vt(v), vd (32,) float32 value
    descales, out (32 x 32) float32, lse (32,) float32, c = the spec's factor (> 0)."""
    if rule not in LEAN_RULES:
        raise ValueError(f"generated P rules are {LEAN_RULES}, got {rule!r}")
    name = f"zyfa_attn_block_gfx950_{rule}"
    prog = program()
    emit = prog.emit
    kernarg = prog.aligned("s", 2)
    prog.regs("s", 1)                                         # s2: workgroup id
    ptrs = prog.aligned("s", 8, 4)                            # q, k, vt, vd
    outs = prog.aligned("s", 4, 4)                            # out, lse
    (fac,) = prog.regs("s", 1)
    (tid,) = prog.regs("v", 1)
    emit("s_load_dwordx8", span(ptrs), span(kernarg), 0)
    emit("s_load_dwordx4", span(outs), span(kernarg), 32)
    emit("s_load_dword", fac, span(kernarg), 48)
    q_ptr, k_ptr, vt_ptr, vd_ptr = (span(ptrs[i:i + 2]) for i in range(0, 8, 2))
    out_ptr, lse_ptr = span(outs[:2]), span(outs[2:])

    row, half, t, off, partner = prog.regs("v", 5)
    emit("v_and_b32", row, 31, tid)                           # the lane's query (and matrix row)
    emit("v_lshrrev_b32", half, 5, tid)
    emit("v_lshlrev_b32", t, 4, half)
    emit("v_lshl_add_u32", off, row, 6, t)                    # row * 64 + 16 * half
    emit("v_xor_b32", partner, 32, tid)
    emit("v_lshlrev_b32", partner, 2, partner)                # ds_bpermute address of lane l ^ 32
    emit("s_waitcnt_lgkm")

    prog.comment("S^T = K Q^T: B = Q (lane: query), A = K rows 32 t + lane % 32")
    qb = prog.aligned("v", 8, 2)
    emit("global_load_dwordx4_at", span(qb[:4]), off, q_ptr, 0)
    emit("global_load_dwordx4_at", span(qb[4:]), off, q_ptr, 32)
    s_tiles = []
    for tile in (0, 1):
        ka = prog.aligned("v", 8, 2)
        emit("global_load_dwordx4_at", span(ka[:4]), off, k_ptr, 32 * 64 * tile)
        emit("global_load_dwordx4_at", span(ka[4:]), off, k_ptr, 32 * 64 * tile + 32)
        emit("s_waitcnt_vm")
        st = prog.aligned("v", 16, 2)
        emit("v_mfma_f32_32x32x64_f8f6f4", span(st), span(ka), span(qb), 0)
        s_tiles.append(st)
    for nops in HAZARD_NOPS:
        emit("s_nop", nops)
    scores = s_tiles[0] + s_tiles[1]                          # register j: byte j of the packing

    prog.comment("row max over the lane's 32 keys and its partner's, m = max(S) c")
    m, other, neg_m = prog.regs("v", 3)
    emit("v_max_f32", m, scores[0], scores[1])
    for sreg in scores[2:]:
        emit("v_max_f32", m, m, sreg)
    emit("ds_bpermute_b32", other, partner, m)
    emit("s_waitcnt_lgkm")
    emit("v_max_f32", m, m, other)
    emit("v_mul_f32", m, fac, m)
    emit("v_mul_f32", neg_m, "-1.0", m)

    prog.comment(f"P codes ({rule}) of y = fma(S, c, -m), row sums of the rounded P, packed")
    consts = load_constants(prog, rule)
    l_sum, shifted, y = prog.regs("v", 3)
    scratch, quad, (lo, hi) = prog.regs("v", 6), prog.regs("v", 4), prog.regs("v", 2)
    sel_pair, sel_halves = prog.regs("s", 2)
    emit("s_mov_b32", sel_pair, lit(PACK_PAIR))
    emit("s_mov_b32", sel_halves, lit(PACK_HALVES))
    emit("v_mov_b32", l_sum, 0)
    pb = prog.aligned("v", 8, 2)                              # B operand: byte j from scores[j]
    for i, dst in enumerate(pb):
        for slot, sreg in enumerate(scores[4 * i:4 * i + 4]):
            emit("v_fma_f32", y, sreg, fac, neg_m)
            w = emit_p_code(prog, y, rule, consts, out=quad[slot], scratch=scratch)
            emit("v_lshlrev_b32", shifted, 20, w)             # the code as a float32 is P 2^-120
            emit("v_fmac_f32", l_sum, lit(2.0 ** 120), shifted)
        emit("v_perm_b32", lo, quad[1], quad[0], sel_pair)
        emit("v_perm_b32", hi, quad[3], quad[2], sel_pair)
        emit("v_perm_b32", dst, hi, lo, sel_halves)
    emit("ds_bpermute_b32", other, partner, l_sum)
    emit("s_waitcnt_lgkm")
    emit("v_add_f32", l_sum, l_sum, other)

    prog.comment("O^T = Vp^T P^T: P in the B operand, V^T rows (value columns) as A")
    va, voff = prog.aligned("v", 8, 2), prog.reg("v")
    emit("v_lshlrev_b32", t, 5, half)
    emit("v_lshl_add_u32", voff, row, 6, t)                   # row * 64 + 32 * half
    emit("global_load_dwordx4_at", span(va[:4]), voff, vt_ptr, 0)
    emit("global_load_dwordx4_at", span(va[4:]), voff, vt_ptr, 16)
    emit("s_waitcnt_vm")
    emit("s_nop", 4)                                          # VALU writes of B before the MFMA reads them
    o = prog.aligned("v", 16, 2)
    emit("v_mfma_f32_32x32x64_f8f6f4", span(o), span(va), span(pb), 0)
    for nops in HAZARD_NOPS:
        emit("s_nop", nops)

    prog.comment("out[query, n] = O / l * vd[n]; register r holds n = 8 (r // 4) + 4 half + r % 4")
    inv, vdo, oo = prog.reg("v"), prog.reg("v"), prog.reg("v")
    emit("v_rcp_f32", inv, l_sum)
    emit("v_lshlrev_b32", t, 4, half)                         # 4 half * 4 bytes
    emit("v_lshl_add_u32", oo, row, 7, t)                     # query * 128 + 16 half
    vd = prog.aligned("v", 16, 4)
    for g in range(4):
        emit("global_load_dwordx4_at", span(vd[4 * g:4 * g + 4]), t, vd_ptr, 32 * g)
    emit("s_waitcnt_vm")
    for r, reg in enumerate(o):
        emit("v_mul_f32", reg, reg, inv)
        emit("v_mul_f32", reg, reg, vd[r])
    for g in range(4):
        emit("global_store_dwordx4_at", oo, span(o[4 * g:4 * g + 4]), out_ptr, 32 * g)

    prog.comment("LSE = ln2 (m + log2 l - 8), from the lanes of the first half")
    lg, lse_off, saved = prog.reg("v"), prog.reg("v"), prog.aligned("s", 2)
    emit("v_log_f32", lg, l_sum)
    emit("v_add_f32", lg, lg, m)
    emit("v_add_f32", lg, lit(-float(F.P_OFFSET_LOG2)), lg)
    emit("v_mul_f32", lg, lit(LN2), lg)
    emit("v_lshlrev_b32", lse_off, 2, row)
    emit("v_cmp_gt_u32", 32, tid)
    emit("s_and_saveexec_b64", span(saved), "vcc")
    emit("global_store_dword", lse_off, lg, lse_ptr)
    emit("s_endpgm")
    abi = {"user_sgpr_count": 2, "user_sgpr_kernarg_segment_ptr": 1, "system_sgpr_workgroup_id_x": 1,
           "system_vgpr_workitem_id": 0}
    args = [("global_buffer", 8 * i, 8) for i in range(6)] + [("by_value", 48, 4)]
    return name, module(name, prog, args, kernarg_size=56, abi=abi, workgroup_size=64)
