"""The generated FP8 attention kernel for gfx950: the whole per-block algorithm of
``zyfa.spec.reference.fp8_attention_spec`` with key blocks of 64 (``block_n=64``, ZYFA's block),
scheduled as ZYFA / CK's FMHA pipelines are: 8 waves a workgroup (256 queries, 32 a wave) in
two groups of 4 that ping-pong, and K / V^T double-buffered in LDS.

Schedule. A wave's loop over key blocks j alternates two phases, each closed by s_barrier:
  matrix phase M(j)   rowsum and P.V of block j - 1, then S^T = K_j Q^T  (all the MFMAs)
  vector phase V(j)   mask, row max, references, lean P of block j; stage the next block
Group 1 starts one barrier late, so while one group is in M the other is in V: the two waves
a SIMD hosts (wave s and wave s + 4) take turns on the matrix cores, s_setprio favouring the
one issuing MFMAs. In V(j) group 0 copies K_{j+1} and group 1 copies V^T_{j+1} from global
memory into the LDS buffers that no wave reads before the next barrier; K_j is read in ticks
2j, 2j+1 and V^T_j in ticks 2j+2, 2j+3 (group 0 / group 1), so two buffers of each suffice.
The emulator (zyfa.verify.gfx950) checks this: it flags any LDS byte one wave writes and
another touches between the same two barriers.

Per key block:
  S^T = K Q^T        per 32-key tile, D / 64 v_mfma_f32_32x32x64_f8f6f4; lane l holds query
                     l % 32 and keys 32 t + 8 (r // 4) + 4 (l // 32) + r % 4 in register r
  mask               keys past seqlen_k or past the bottom-right causal limit -> -inf
  m                  row max over the lane's 32 keys and its partner's (l ^ 32, ds_bpermute);
                     t = S c is monotone in S for c > 0, so m = max(S) c
  A, alpha           the lazy reference (moves when m > A + 8) and alpha = 2^(A - A')
  r                  the block's P reference: ref_rule "block" r = m; "block_pow2"
                     r = A' - d with d = floor(A' - m), so the block's weight 2^(r - A') is 2^-d
  P                  lean-rule codes of y = fma(S, c, -r), packed with v_perm straight into
                     the B operand of P.V (byte j: tile j // 16, register j % 16; V^T's keys
                     permuted on the host to match, zyfa.spec.key_order.gfx950_vt)
  l, O               row sums of the rounded P by one MFMA of E4M3 ones against P^T, and
                     O^T = Vp^T P^T per 32 value columns:
                     block_pow2: v_mfma_scale_f32_32x32x64_f8f6f4 straight into the running
                       sums, P's E8M0 scale 127 - d (clamped at 0) applying the weight 2^-d:
                       no second accumulator and no multiply-add per element (ZYFA's way)
                     block: a fresh accumulator, total += O beta with beta = 2^(m - A')
                     (both: total and l multiplied by alpha only when some lane's A moved)
Epilogue: out = total / l * v_descale, LSE = ln2 (A + log2 l - 8).

The spec's block_pow2 weight is 2^(r - A') of the float32 r; it equals 2^-d unless A' - d
rounds (|A'| small and d large), and then differs by under 2^-17 relative: inside the
float32 accumulation noise the tests allow. Wait states around the MFMAs are conservative
counts (``HAZARD_NOPS``); the emulator does not model them, and no MI355X has run this code.
v_exp/v_rcp/v_log are approximate on hardware.
"""
from __future__ import annotations

import itertools

from ...spec.key_order import gfx950_vt
from ...spec.constants import LN2, NEG_FLOOR, P_OFFSET_LOG2, RESCALE_THRESHOLD
from .lean_p import LEAN_RULES, emit_p_codes, load_constants
from .target import lit, module, program, span

QUERIES, BLOCK_N = 32, 64
GROUP_WAVES, GROUPS = 4, 2
WAVES = GROUP_WAVES * GROUPS         # 256 queries a workgroup share each K/V block in LDS
HEAD_DIMS = (64, 128, 192, 256)      # in slices of 64 (192: MLA's query/key dim)
REF_RULES = ("block", "block_pow2")
MAX_VGPRS = 256                      # VGPRs + AGPRs a wave may hold: 512 a SIMD lane, two waves a SIMD
STEADY_STATE_SKIPS = (".Lmasked", ".Lrescaled")   # forward branches the steady state takes


def fits(head_dim: int, value_dim: int) -> bool:
    """Whether the kernel for these head dims fits a wave's registers (it raises otherwise)."""
    try:
        attention_kernel("lean_cubic", True, head_dim, value_dim)
    except ValueError:
        return False
    return True


HAZARD_NOPS = (15, 1)       # after an MFMA 32x32 before its result is read (as LLVM writes it)
PACK_PAIR, PACK_HALVES = 0x0C0C0400, 0x05040100
NEG_INF = 0xFF800000
E4M3_ONES = 0x38383838      # four E4M3 1.0
E8M0_ONE = 127              # the scale byte of 2^0


def attention_kernel(rule: str = "lean_cubic", causal: bool = True, head_dim: int = 128,
                     value_dim: int = 128, ref_rule: str = "block") -> tuple[str, str]:
    """(name, assembly) of the kernel, every head in one launch: args q (B, Sq, Hq, D) and k
    (B, Sk, Hkv, D) E4M3, vt = zyfa.spec.key_order.gfx950_vt of v as (B, Hkv, Sk, Dv): (B, Hkv, Dv, Sk padded
    to 64), vd (B, Hq, Dv) float32, out (B, Sq, Hq, Dv) float32, lse (B, Hq, Sq) float32,
    fac (B, Hq) float32 (the spec's factor c, > 0), kv_head (Hq,) uint32, then seqlen_q,
    seqlen_k (seqlen_q <= seqlen_k when causal), heads, kv_heads; all contiguous, and each
    tensor's offsets within a head under 2^32 bytes. Grid (ceil(Sq / 256), Hq, B), 512 threads."""
    if rule not in LEAN_RULES:
        raise ValueError(f"generated P rules are {LEAN_RULES}, got {rule!r}")
    if ref_rule not in REF_RULES:
        raise ValueError(f"generated reference rules are {REF_RULES}, got {ref_rule!r}")
    if head_dim not in HEAD_DIMS or value_dim % 32 or not 32 <= value_dim <= 128:
        raise ValueError(f"head_dim must be one of {HEAD_DIMS} and value_dim a multiple of 32 up to 128, "
                         f"got {head_dim}, {value_dim}")
    pow2 = ref_rule == "block_pow2"
    chunks, dv_tiles = head_dim // 64, value_dim // 32
    k_bytes, v_bytes = BLOCK_N * head_dim, BLOCK_N * value_dim      # one buffer each
    v_lds = 2 * k_bytes                                             # K buffers, then V^T buffers
    name = f"zyfa_attn_gfx950_{rule}_{ref_rule}_d{head_dim}_{value_dim}_{'causal' if causal else 'full'}"
    prog = program()
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
    q_ptr, k_ptr, vt_ptr, vd_ptr = (span(ptrs[i:i + 2]) for i in range(0, 8, 2))
    out_ptr, lse_ptr, fac_ptr, kv_ptr = (span(outs[i:i + 2]) for i in range(0, 8, 2))

    def add_product(ptr, x, y):
        """ptr (a 64-bit SGPR pair) += x * y, the product taken to 64 bits (x, y not lo / hi)."""
        emit("s_mul_i32", lo, x, y)
        emit("s_mul_hi_u32", hi, x, y)
        emit("s_add_u32", ptr[0], ptr[0], lo)
        emit("s_addc_u32", ptr[1], ptr[1], hi)

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
    emit("s_mul_i32", q_stride, hq, head_dim)
    emit("s_mul_i32", k_stride, hkv, head_dim)
    emit("s_mul_i32", o_stride, hq, 4 * value_dim)
    emit("s_mul_i32", n, batch, sq)
    add_product(ptrs[0:2], n, q_stride)                          # q += (b Sq) (Hq D) + h D
    emit("s_mov_b32", const, head_dim)
    add_product(ptrs[0:2], head, const)
    emit("s_mul_i32", n, batch, sk)
    add_product(ptrs[2:4], n, k_stride)                          # k += (b Sk) (Hkv D) + kvh D
    add_product(ptrs[2:4], kvh, const)
    emit("s_mul_i32", n, batch, sq)
    add_product(outs[0:2], n, o_stride)                          # out += (b Sq) (Hq Dv 4) + h Dv 4
    emit("s_mov_b32", const, 4 * value_dim)
    add_product(outs[0:2], head, const)
    add_product(ptrs[6:8], bh, const)                            # vd += (b Hq + h) Dv 4
    emit("s_lshl_b32", n, sq, 2)
    add_product(outs[2:4], bh, n)                                # lse += (b Hq + h) Sq 4

    prog.comment("lane coordinates, query limits, the number of key blocks")
    s_tiles = [prog.aligned("v", 16, 2) for _ in range(2)]       # scores: free before the loop, so
    qload, qoff, t32, wave = s_tiles[1][4:8]                     # the prologue's temporaries live there
    row, half, t16, query, partner, limit, neg_inf, lane, w16 = prog.regs("v", 9)
    q0, sk_last, n_blocks, skp, tmp, group = prog.regs("s", 6)
    emit("v_and_b32", row, 31, tid)
    emit("v_and_b32", lane, 63, tid)
    emit("v_lshrrev_b32", half, 5, lane)
    emit("v_lshlrev_b32", t16, 4, half)
    emit("v_lshrrev_b32", wave, 6, tid)                          # the wave within the workgroup
    emit("v_lshrrev_b32", w16, 2, wave)
    emit("v_readfirstlane_b32", group, w16)                      # its group, 0 or 1 (wave-uniform)
    emit("v_and_b32", w16, GROUP_WAVES - 1, wave)
    emit("v_lshlrev_b32", w16, 4, w16)                           # its 16-byte column when staging
    emit("v_xor_b32", partner, 32, tid)
    emit("v_and_b32", partner, 63, partner)
    emit("v_lshlrev_b32", partner, 2, partner)                   # ds_bpermute address of lane l ^ 32
    emit("v_mov_b32", neg_inf, lit(NEG_INF))
    emit("s_lshl_b32", q0, wg, 8)                                # first query of the workgroup
    emit("v_lshl_add_u32", query, wave, 5, row)                  # + 32 wave + row
    emit("v_add_u32", query, q0, query)
    emit("s_add_u32", sk_last, sk, -1 & 0xFFFFFFFF)
    emit("s_add_u32", tmp, sq, -1 & 0xFFFFFFFF)
    emit("v_min_u32", qload, tmp, query)                         # rows past seqlen_q load the last row
    if causal:
        emit("s_sub_u32", tmp, sk, sq)                           # bottom-right: query i sees keys <= i + Sk - Sq
        emit("v_add_u32", limit, tmp, query)
        emit("v_min_u32", limit, sk_last, limit)
        emit("s_add_u32", n_blocks, q0, QUERIES * WAVES)        # keys needed: min(q0 + 256 + Sk - Sq, Sk)
        emit("s_add_u32", n_blocks, n_blocks, tmp)
        emit("s_min_u32", n_blocks, n_blocks, sk)
    else:
        emit("v_mov_b32", limit, sk_last)
        emit("s_mov_b32", n_blocks, sk)
    emit("s_add_u32", n_blocks, n_blocks, BLOCK_N - 1)
    emit("s_lshr_b32", n_blocks, n_blocks, 6)
    band = prog.reg("s")                                         # blocks from here on need a mask
    emit("s_and_b32", band, sk, -BLOCK_N & 0xFFFFFFFF)
    if causal:
        emit("s_add_u32", tmp, tmp, q0)                          # q0 + Sk - Sq + 1: keys below are seen by all
        emit("s_add_u32", tmp, tmp, 1)
        emit("s_and_b32", tmp, tmp, -BLOCK_N & 0xFFFFFFFF)
        emit("s_min_u32", band, band, tmp)
    emit("s_add_u32", skp, sk, BLOCK_N - 1)
    emit("s_and_b32", skp, skp, -BLOCK_N & 0xFFFFFFFF)           # V^T row stride: Sk padded to 64
    emit("s_mul_i32", n, skp, value_dim)
    add_product(ptrs[4:6], bkv, n)                               # vt += (b Hkv + kvh) Dv Sk_padded

    prog.comment("Q as the B operand of S^T = K Q^T, one 8-register slice per 64 head dims")
    (dim,) = prog.regs("s", 1)
    emit("s_mov_b32", dim, head_dim)
    emit("v_mad_u32_u24", qoff, qload, q_stride, t16)            # row * Hq D + 16 half
    qb = [prog.aligned("v", 8, 2) for _ in range(chunks)]
    for dc, regs in enumerate(qb):
        emit("global_load_dwordx4_at", span(regs[:4]), qoff, q_ptr, 64 * dc)
        emit("global_load_dwordx4_at", span(regs[4:]), qoff, q_ptr, 64 * dc + 32)

    prog.comment("LDS: two K buffers (64 keys x D bytes), then two V^T buffers (Dv rows x 64 bytes);")
    prog.comment("where this lane reads its MFMA operands, and where it stages K (a key a lane) or V^T")
    k_read, v_read, k_stage, vg_stage, v_stage, addr = prog.regs("v", 6)
    sk64, key_next, buf, kb, key0 = prog.regs("s", 5)
    emit("v_mad_u32_u24", k_read, row, dim, t16)                 # (32 t + row) * D + 16 half (+ 32 t D)
    emit("v_lshlrev_b32", t32, 5, half)
    emit("v_lshl_add_u32", v_read, row, 6, t32)                  # (32 d + row) * 64 + 32 half
    emit("v_mad_u32_u24", k_stage, lane, dim, w16)               # lane (a key) * D + 16 wave
    emit("v_mad_u32_u24", vg_stage, lane, skp, w16)              # global: row * Sk_padded + 16 wave
    emit("v_lshl_add_u32", v_stage, lane, 6, w16)                # LDS: lane (a V^T row) * 64 + 16 wave
    emit("s_lshl_b32", sk64, skp, 6)                             # 64 V^T rows further
    k_cols = head_dim // 16 // GROUP_WAVES
    v_rows = max(value_dim // 64, 1)
    staged = prog.aligned("v", 4 * max(k_cols, v_rows), 4)
    exec_saved = prog.aligned("s", 2)

    serial = itertools.count()

    def fresh(label):                                            # the staging code is emitted three times
        return f"{label}_{next(serial)}"

    def v_rows_only(body):
        """``body()`` with the lanes past V^T's Dv rows off (when Dv < 64 lanes)."""
        if value_dim < 64:
            emit("v_cmp_gt_u32", value_dim, lane)
            emit("s_and_saveexec_b64", span(exec_saved), "vcc")
        body()
        if value_dim < 64:
            emit("s_mov_b64", "exec", span(exec_saved))

    def stage_loads(key_first):
        """Issue this wave's global loads of block ``key_first``: group 0 K, group 1 V^T."""
        load_v, loaded = fresh(".Lload_v"), fresh(".Lloaded")
        emit("s_cmp_lg_u32", group, 0)
        emit("s_cbranch_scc1", load_v)
        emit("v_add_u32", addr, key_first, lane)
        emit("v_min_u32", addr, sk_last, addr)                   # keys past seqlen_k load the last key
        emit("v_mad_u32_u24", addr, addr, k_stride, w16)
        for c in range(k_cols):
            emit("global_load_dwordx4_at", span(staged[4 * c:4 * c + 4]), addr, k_ptr, 64 * c)
        emit("s_branch", loaded)
        prog.label(load_v)
        emit("v_add_u32", addr, key_first, vg_stage)

        def load_rows():
            for i in range(v_rows):
                emit("global_load_dwordx4_at", span(staged[4 * i:4 * i + 4]), addr, vt_ptr, 0)
                if i + 1 < v_rows:
                    emit("v_add_u32", addr, sk64, addr)
        v_rows_only(load_rows)
        prog.label(loaded)

    def stage_writes(block_parity):
        """Write the staged block into the buffers of parity ``block_parity`` (an SGPR, 0 or 1)."""
        write_v, written = fresh(".Lwrite_v"), fresh(".Lwritten")
        emit("s_waitcnt_vm")
        emit("s_cmp_lg_u32", group, 0)
        emit("s_cbranch_scc1", write_v)
        emit("s_mul_i32", buf, block_parity, k_bytes)
        emit("v_add_u32", addr, buf, k_stage)
        for c in range(k_cols):
            emit("ds_write_b128_at", addr, span(staged[4 * c:4 * c + 4]), 64 * c)
        emit("s_branch", written)
        prog.label(write_v)
        emit("s_mul_i32", buf, block_parity, v_bytes)
        emit("v_add_u32", addr, buf, v_stage)
        v_rows_only(lambda: [emit("ds_write_b128_at", addr, span(staged[4 * i:4 * i + 4]), v_lds + 64 * 64 * i)
                             for i in range(v_rows)])
        prog.label(written)
        emit("s_waitcnt_lgkm")

    prog.comment("running state: total (O^T per value tile), row sum l, reference A; block_pow2 keeps")
    prog.comment("total and the row sums in AGPRs, where only the matrix cores add to them")
    acc = "a" if pow2 else "v"
    total = [prog.aligned(acc, 16, 2) for _ in range(dv_tiles)]
    o = prog.aligned(acc, 16, 2)              # block: P.V's fresh accumulator and the row sums;
    l_sum = o[0] if pow2 else prog.reg("v")   # block_pow2: the running row sums (every row the sum)
    for reg in [r for tile in total for r in tile] + (o if pow2 else [l_sum]):
        emit("v_accvgpr_write_b32" if pow2 else "v_mov_b32", reg, 0)
    (A,) = prog.regs("v", 1)
    emit("v_mov_b32", A, lit(NEG_FLOOR))
    consts = load_constants(prog, rule)
    sel_pair, sel_halves = prog.regs("s", 2)
    emit("s_mov_b32", sel_pair, lit(PACK_PAIR))
    emit("s_mov_b32", sel_halves, lit(PACK_HALVES))

    ka = [prog.aligned("v", 8, 2) for _ in range(chunks)]
    kbase, kvalid = prog.regs("v", 2)
    m, other, a_new, alpha, beta = prog.regs("v", 5)
    thr = other                                                   # the partner's max is dead by then
    y, c_pair, neg_r_pair, alpha_pair, beta_pair = (prog.aligned("v", 2, 2) for _ in range(5))
    neg_r = neg_r_pair[0]
    ones = prog.aligned("v", 8, 2)                               # an A operand of E4M3 ones: P^T's row sums
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
    lo, hi = y                                                   # y is dead once a quad's codes are made
    p_scale, one_scale = prog.regs("v", 2)                       # E8M0 scale bytes (scales live in VGPRs)
    emit("v_mov_b32", one_scale, E8M0_ONE)
    for reg in c_pair:
        emit("v_mov_b32", reg, fac)

    def matrix_products(v_parity):
        """Row sums and O^T = Vp^T P^T of the previous block, its V^T in buffers of ``v_parity``."""
        emit("s_mul_i32", buf, v_parity, v_bytes)
        emit("v_add_u32", addr, buf, v_read)
        if pow2:
            emit("v_mfma_scale_f32_32x32x64_f8f6f4", span(o), span(ones), span(pb), span(o), one_scale, p_scale)
        else:
            emit("v_mfma_f32_32x32x64_f8f6f4", span(o), span(ones), span(pb), 0)
            for nops in HAZARD_NOPS:
                emit("s_nop", nops)
            emit("v_fmac_f32", l_sum, o[0], beta)
        for d, tile in enumerate(total):
            emit("ds_read_b128_at", span(va[:4]), addr, v_lds + 32 * 64 * d)
            emit("ds_read_b128_at", span(va[4:]), addr, v_lds + 32 * 64 * d + 16)
            emit("s_waitcnt_lgkm")
            if pow2:
                emit("v_mfma_scale_f32_32x32x64_f8f6f4", span(tile), span(va), span(pb), span(tile), one_scale, p_scale)
                continue
            emit("v_mfma_f32_32x32x64_f8f6f4", span(o), span(va), span(pb), 0)
            for nops in HAZARD_NOPS:
                emit("s_nop", nops)
            for t in range(0, 16, 2):                            # two elements an instruction
                emit("v_pk_fma_f32", span(tile[t:t + 2]), span(o[t:t + 2]), span(beta_pair), span(tile[t:t + 2]))

    prog.comment("prologue: group 0 stages K_0, then (one barrier later: the ping-pong offset) group 1 V^T_0")
    emit("s_mov_b32", kb, 0)
    emit("s_mov_b32", key0, 0)
    emit("s_waitcnt_vm")
    stage_loads(key0)
    emit("s_cmp_lg_u32", group, 0)
    emit("s_cbranch_scc1", ".Lk0_staged")
    stage_writes(kb)
    prog.label(".Lk0_staged")
    emit("s_barrier")
    emit("s_cmp_lg_u32", group, 0)
    emit("s_cbranch_scc0", ".Lblock")
    stage_writes(kb)
    emit("s_barrier")

    prog.label(".Lblock")
    prog.comment("matrix phase: the previous block's row sums and P.V, then S^T = K Q^T (K from LDS)")
    emit("s_setprio", 1)
    emit("s_nop", 4)                                             # VALU writes of B / scales before MFMA reads
    emit("s_cmp_eq_u32", kb, 0)
    emit("s_cbranch_scc1", ".Lfirst_block")
    emit("s_add_u32", tmp, kb, 1)
    emit("s_and_b32", tmp, tmp, 1)                               # (kb - 1) & 1
    matrix_products(tmp)
    prog.label(".Lfirst_block")
    emit("s_and_b32", tmp, kb, 1)
    emit("s_mul_i32", buf, tmp, k_bytes)
    emit("v_add_u32", addr, buf, k_read)
    for tile, st in enumerate(s_tiles):
        for dc, regs in enumerate(ka):
            emit("ds_read_b128_at", span(regs[:4]), addr, 32 * head_dim * tile + 64 * dc)
            emit("ds_read_b128_at", span(regs[4:]), addr, 32 * head_dim * tile + 64 * dc + 32)
        emit("s_waitcnt_lgkm")
        for dc in range(chunks):
            emit("v_mfma_f32_32x32x64_f8f6f4", span(st), span(ka[dc]), span(qb[dc]), span(st) if dc else 0)
    emit("s_setprio", 0)
    emit("s_barrier")

    prog.comment("vector phase: stage the next block's loads, then softmax of this one")
    emit("s_add_u32", key_next, key0, BLOCK_N)
    emit("s_add_u32", tmp, kb, 1)
    emit("s_cmp_lt_u32", tmp, n_blocks)
    emit("s_cbranch_scc0", ".Lno_loads")
    stage_loads(key_next)
    prog.label(".Lno_loads")
    for nops in HAZARD_NOPS:
        emit("s_nop", nops)
    scores = s_tiles[0] + s_tiles[1]

    prog.comment("mask (diagonal band and key tail only): key > the query's limit -> -inf")
    emit("s_cmp_lt_u32", key0, band)
    emit("s_cbranch_scc1", ".Lmasked")
    emit("v_lshl_add_u32", kbase, half, 2, key0)                 # the block's first key + 4 half
    for j, sreg in enumerate(scores):
        emit("v_add_u32", kvalid, 32 * (j // 16) + 8 * ((j % 16) // 4) + j % 4, kbase)
        emit("v_cmp_gt_u32_vv", kvalid, limit)
        emit("v_cndmask_b32", sreg, sreg, neg_inf)
    prog.label(".Lmasked")

    prog.comment(f"row max m = max(S) c, lazy reference A, the block's reference r ({ref_rule})")
    emit("v_max3_f32", m, scores[0], scores[1], scores[2])
    for k in range(3, len(scores), 2):                           # three-input max: half the instructions
        emit("v_max3_f32", m, m, scores[k], scores[k + 1]) if k + 1 < len(scores) else emit("v_max_f32", m, m, scores[k])
    emit("ds_bpermute_b32", other, partner, m)
    emit("s_waitcnt_lgkm")
    emit("v_max_f32", m, m, other)
    emit("v_mul_f32", m, fac, m)
    emit("v_max_f32", m, lit(NEG_FLOOR), m)                      # all-masked rows keep the floor
    emit("v_add_f32", thr, lit(RESCALE_THRESHOLD), A)
    emit("v_cmp_gt_f32", m, thr)
    emit("v_cndmask_b32", a_new, A, m)                           # m > A + 8 ? m : A
    emit("v_sub_f32", alpha, A, a_new)
    emit("v_exp_f32", alpha, alpha)
    emit("v_mov_b32", A, a_new)
    if pow2:
        d = beta                                                 # no beta: the MFMA applies 2^-d
        emit("v_sub_f32", d, a_new, m)
        emit("v_floor_f32", d, d)
        emit("v_sub_f32", neg_r, d, a_new)                       # -r = d - A' (the spec's A' - d, negated exactly)
        emit("v_cvt_i32_f32", p_scale, d)                        # saturates: masked rows' huge d -> INT_MAX
        emit("v_sub_u32", p_scale, E8M0_ONE, p_scale)
        emit("v_max_i32", p_scale, 0, p_scale)                   # weights below 2^-127: 2^-127 (negligible)
    else:
        emit("v_sub_f32", beta, m, a_new)
        emit("v_exp_f32", beta, beta)
        emit("v_mul_f32", neg_r, "-1.0", m)

    prog.comment(f"P codes ({rule}) of y = fma(S, c, -r), two scores an instruction, into the B operand")
    emit("v_mov_b32", neg_r_pair[1], neg_r)
    for i, dst in enumerate(pb):
        for q2 in (0, 1):
            pair = scores[4 * i + 2 * q2:4 * i + 2 * q2 + 2]
            emit("v_pk_fma_f32", span(y), span(pair), span(c_pair), span(neg_r_pair))
            emit_p_codes(prog, y, rule, consts, out=quad[2 * q2:2 * q2 + 2], scratch=scratch)
        emit("v_perm_b32", lo, quad[1], quad[0], sel_pair)
        emit("v_perm_b32", hi, quad[3], quad[2], sel_pair)
        emit("v_perm_b32", dst, hi, lo, sel_halves)

    prog.comment("total and l *= alpha, skipped when no lane's reference moved (alpha = 1 exactly)")
    emit("v_cmp_neq_f32", 1.0, alpha)
    emit("s_cbranch_vccz", ".Lrescaled")
    emit("v_mov_b32", alpha_pair[0], alpha)
    emit("v_mov_b32", alpha_pair[1], alpha)
    if pow2:                                                     # AGPRs: through a VGPR pair (rare)
        work = scratch[0]
        for pair in [[l_sum, o[1]]] + [tile[t:t + 2] for tile in total for t in range(0, 16, 2)]:
            for src, dst in zip(pair, work):
                emit("v_accvgpr_read_b32", dst, src)
            emit("v_pk_mul_f32", span(work), span(work), span(alpha_pair))
            for src, dst in zip(work, pair):
                emit("v_accvgpr_write_b32", dst, src)
    else:
        emit("v_mul_f32", l_sum, l_sum, alpha)
        for tile in total:
            for t in range(0, 16, 2):
                emit("v_pk_mul_f32", span(tile[t:t + 2]), span(tile[t:t + 2]), span(alpha_pair))
    prog.label(".Lrescaled")
    if not pow2:
        emit("v_mov_b32", beta_pair[0], beta)
        emit("v_mov_b32", beta_pair[1], beta)

    prog.comment("write the staged next block into the buffers no wave reads before the next barrier")
    emit("s_add_u32", tmp, kb, 1)
    emit("s_cmp_lt_u32", tmp, n_blocks)
    emit("s_cbranch_scc0", ".Lno_writes")
    emit("s_and_b32", tmp, tmp, 1)
    stage_writes(tmp)
    prog.label(".Lno_writes")
    emit("s_barrier")
    emit("s_add_u32", kb, kb, 1)
    emit("s_mov_b32", key0, key_next)
    emit("s_cmp_lt_u32", kb, n_blocks)
    emit("s_cbranch_scc1", ".Lblock")

    prog.comment("the last block's row sums and P.V; group 0 then passes the barrier group 1's offset left over")
    emit("s_setprio", 1)
    emit("s_nop", 4)
    emit("s_add_u32", tmp, kb, 1)
    emit("s_and_b32", tmp, tmp, 1)
    matrix_products(tmp)
    emit("s_setprio", 0)
    emit("s_cmp_lg_u32", group, 0)
    emit("s_cbranch_scc1", ".Lepilogue")
    emit("s_barrier")
    prog.label(".Lepilogue")
    for nops in HAZARD_NOPS:
        emit("s_nop", nops)

    prog.comment("epilogue: out[query, n] = total / l * vd[n]; register r holds n = 32 d + 8 (r // 4) + 4 half + r % 4")
    inv, oo, lg, lse_off, l_final = s_tiles[1][:5]                # the scores are dead by now
    saved = prog.aligned("s", 2)
    vd = s_tiles[0]
    emit("v_accvgpr_read_b32" if pow2 else "v_mov_b32", l_final, l_sum)
    l_sum = l_final
    emit("v_rcp_f32", inv, l_sum)
    emit("v_mul_lo_u32", oo, query, o_stride)                    # query * Hq Dv 4
    emit("v_add_u32", oo, oo, t16)                               # + 16 half bytes (4 half floats)
    emit("v_log_f32", lg, l_sum)
    emit("v_add_f32", lg, lg, A)
    emit("v_add_f32", lg, lit(-float(P_OFFSET_LOG2)), lg)
    emit("v_mul_f32", lg, lit(LN2), lg)
    emit("v_lshlrev_b32", lse_off, 2, query)
    emit("v_cmp_gt_u32", sq, query)                              # rows past seqlen_q store nothing
    emit("s_and_saveexec_b64", span(saved), "vcc")
    for d, tile in enumerate(total):
        for g in range(4):
            emit("global_load_dwordx4_at", span(vd[4 * g:4 * g + 4]), t16, vd_ptr, 128 * d + 32 * g)
        if pow2:                                                 # into VGPRs: the product is VALU work
            tile = pb + va                                       # the operands are dead by now
            for src, dst in zip(total[d], tile):
                emit("v_accvgpr_read_b32", dst, src)
        emit("s_waitcnt_vm")
        for r, reg in enumerate(tile):
            emit("v_mul_f32", reg, reg, inv)
            emit("v_mul_f32", reg, reg, vd[r])
        for g in range(4):
            emit("global_store_dwordx4_at", oo, span(tile[4 * g:4 * g + 4]), out_ptr, 128 * d + 32 * g)
    emit("v_cmp_eq_u32", 0, half)
    emit("s_and_b64", "exec", "exec", "vcc")
    emit("global_store_dword", lse_off, lg, lse_ptr)
    emit("s_endpgm")
    counts = prog.register_counts()
    unified = (counts.get("v", 0) + 3) // 4 * 4 + counts.get("a", 0)
    if unified > MAX_VGPRS:
        raise ValueError(f"head dims ({head_dim}, {value_dim}) need {unified} VGPRs and AGPRs, more than the "
                         f"{MAX_VGPRS} a wave may hold when two share a SIMD (ping-pong); this kernel does not "
                         f"take them yet")
    abi = {"user_sgpr_count": 2, "user_sgpr_kernarg_segment_ptr": 1, "system_sgpr_workgroup_id_x": 1,
           "system_sgpr_workgroup_id_y": 1, "system_sgpr_workgroup_id_z": 1, "system_vgpr_workitem_id": 0}
    args = [("global_buffer", 8 * i, 8) for i in range(8)] + [("by_value", 64 + 4 * i, 4) for i in range(4)]
    return name, module(name, prog, args, kernarg_size=80, abi=abi, workgroup_size=64 * WAVES,
                        lds_bytes=2 * BLOCK_N * (head_dim + value_dim))


def launch_args(q, k, v, q_descale, k_descale, v_descale, softmax_scale, device):
    """The kernel's tensors for FlashAttention-layout FP8 q/k/v (per-head descales): byte views
    of q and k, the permuted V^T, per-query-head v descales and factors c, the kv-head table.
    No host synchronization: c stays on the device."""
    import math

    import torch

    from ...spec.descales import head_factor, per_channel_v_descale
    B, Sq, Hq, D = q.shape
    Sk, Hkv, Dv = k.shape[1], k.shape[2], v.shape[-1]
    group = Hq // Hkv
    if max(Sq * Hq * 4 * Dv, Sk * Hkv * D, Dv * (-(-Sk // BLOCK_N) * BLOCK_N)) >= 2 ** 32:
        raise ValueError("the gfx950 kernel addresses within a head with 32-bit offsets; this shape needs more")
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    fac = head_factor(q_descale, k_descale, B, Hkv, scale, device).repeat_interleave(group, dim=1)
    vd = per_channel_v_descale(v_descale.to(device), B, Hkv, Dv).repeat_interleave(group, dim=1)
    as_bytes = lambda t: t.contiguous().view(torch.uint8)   # noqa: E731
    return dict(q=as_bytes(q), k=as_bytes(k), vt=gfx950_vt(as_bytes(v).permute(0, 2, 1, 3)),
                vd=vd.float().contiguous(), fac=fac.float().contiguous(),
                kv_head=(torch.arange(Hq, device=device, dtype=torch.int32) // group).contiguous())


def grid(q) -> tuple[int, int, int]:
    B, Sq, Hq, _ = q.shape
    return (-(-Sq // (QUERIES * WAVES)), Hq, B)

