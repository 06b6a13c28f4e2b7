"""The generated FP8 attention kernel for gfx950: the whole per-block algorithm of
``zyfa.spec.reference.fp8_attention_spec`` with key blocks of 64 (``block_n=64``, ZYFA's block),
scheduled as ZYFA / CK's FMHA pipelines are: 8 waves a workgroup (256 queries, 32 a wave) in
two groups of 4 that ping-pong, and K / V^T double-buffered in LDS.

This module holds the entry point and the schedule; the stages, each in its module, are the
ones the PTX generator and the Triton kernel name:
  set-up     arguments, coordinates, Q (``setup``), the LDS layout and staging (``lds``),
             the running state (``total.emit_running_state``), the loop's constants
  scores     S^T = K Q^T and the mask (``scores``)
  P          row max, references, lean P codes (``p``; the codes from ``lean_p``)
  P.V        row sums and O (``pv``)
  total      the rescale and the accumulation (``total``)
  epilogue   out and LSE (``epilogue``)
They share the typed records of ``state``; ``variant`` holds the parameters and tile sizes.

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

Wait states around the MFMAs are conservative counts (``variant.HAZARD_NOPS``); the emulator
does not model them, and no MI355X has run this code. v_exp/v_rcp/v_log are approximate on
hardware.
"""
from __future__ import annotations

from ...spec.key_order import gfx950_vt
from . import lds, p, pv, scores, setup, total
from .epilogue import emit_epilogue
from .state import Kernel
from .target import module, program
from .variant import BLOCK_N, HEAD_DIMS, QUERIES, REF_RULES, WAVES, Variant, emit_mfma_wait

__all__ = ["BLOCK_N", "HEAD_DIMS", "REF_RULES", "STEADY_STATE_SKIPS", "WAVES", "attention_kernel", "fits", "grid",
           "launch_args"]

MAX_VGPRS = 256                      # VGPRs + AGPRs a wave may hold: 512 a SIMD lane, two waves a SIMD
STEADY_STATE_SKIPS = (scores.MASK_SKIP, total.RESCALE_SKIP)   # forward branches the steady state takes


def fits(head_dim: int, value_dim: int) -> bool:
    """Whether the kernel for these head dims fits a wave's registers (it raises otherwise)."""
    try:
        attention_kernel("lean_cubic", True, head_dim, value_dim)
    except ValueError:
        return False
    return True


def attention_kernel(rule: str = "lean_cubic", causal: bool = True, head_dim: int = 128,
                     value_dim: int = 128, ref_rule: str = "block") -> tuple[str, str]:
    """(name, assembly) of the kernel, every head in one launch: args q (B, Sq, Hq, D) and k
    (B, Sk, Hkv, D) E4M3, vt = zyfa.spec.key_order.gfx950_vt of v as (B, Hkv, Sk, Dv): (B, Hkv, Dv, Sk padded
    to 64), vd (B, Hq, Dv) float32, out (B, Sq, Hq, Dv) float32, lse (B, Hq, Sq) float32,
    fac (B, Hq) float32 (the spec's factor c, > 0), kv_head (Hq,) uint32, then seqlen_q,
    seqlen_k (seqlen_q <= seqlen_k when causal), heads, kv_heads; all contiguous, and each
    tensor's offsets within a head under 2^32 bytes. Grid (ceil(Sq / 256), Hq, B), 512 threads."""
    v = Variant(rule, causal, head_dim, value_dim, ref_rule)
    prog = program()
    args = setup.emit_arguments(prog, v)
    lanes = setup.emit_coordinates(prog, v, args)
    q = setup.emit_q(prog, v, args, lanes)
    layout = lds.emit_layout(prog, v, args, lanes, q)
    running = total.emit_running_state(prog, v)
    k = setup.emit_constants(prog, v, args, lanes, q, layout, running)
    _emit_loop(k)
    emit_epilogue(k)
    prog.emit("s_endpgm")
    counts = prog.register_counts()
    unified = (counts.get("v", 0) + 3) // 4 * 4 + counts.get("a", 0)
    if unified > MAX_VGPRS:
        raise ValueError(f"head dims ({head_dim}, {value_dim}) need {unified} VGPRs and AGPRs, more than the "
                         f"{MAX_VGPRS} a wave may hold when two share a SIMD (ping-pong); this kernel does not "
                         f"take them yet")
    abi = {"user_sgpr_count": 2, "user_sgpr_kernarg_segment_ptr": 1, "system_sgpr_workgroup_id_x": 1,
           "system_sgpr_workgroup_id_y": 1, "system_sgpr_workgroup_id_z": 1, "system_vgpr_workitem_id": 0}
    args = [("global_buffer", 8 * i, 8) for i in range(8)] + [("by_value", 64 + 4 * i, 4) for i in range(4)]
    return v.name, module(v.name, prog, args, kernarg_size=80, abi=abi, workgroup_size=64 * WAVES,
                          lds_bytes=2 * BLOCK_N * (head_dim + value_dim))


def _emit_previous_products(k: Kernel) -> None:
    """P.V of block kb - 1, whose V^T is in the buffers of parity (kb - 1) & 1."""
    tmp = k.lanes.tmp
    k.emit("s_add_u32", tmp, k.lds.kb, 1)
    k.emit("s_and_b32", tmp, tmp, 1)                             # (kb - 1) & 1
    pv.emit_products(k, tmp)


def _emit_loop(k: Kernel) -> None:
    """The prologue's staging, the loop over key blocks in its two phases, the last block's P.V."""
    prog, emit, ln, L = k.prog, k.emit, k.lanes, k.lds
    tmp, group = ln.tmp, ln.group
    prog.comment("prologue: group 0 stages K_0, then (one barrier later: the ping-pong offset) group 1 V^T_0")
    emit("s_mov_b32", L.kb, 0)
    emit("s_mov_b32", L.key0, 0)
    emit("s_waitcnt_vm")
    lds.emit_stage_loads(k, L.key0)
    emit("s_cmp_lg_u32", group, 0)
    emit("s_cbranch_scc1", ".Lk0_staged")
    lds.emit_stage_writes(k, L.kb)
    prog.label(".Lk0_staged")
    emit("s_barrier")
    emit("s_cmp_lg_u32", group, 0)
    emit("s_cbranch_scc0", ".Lblock")
    lds.emit_stage_writes(k, L.kb)
    emit("s_barrier")

    prog.label(".Lblock")
    prog.comment("matrix phase: the previous block's row sums and P.V, then S^T = K Q^T (K from LDS)")
    emit("s_setprio", 1)
    emit("s_nop", 4)                                             # VALU writes of B / scales before MFMA reads
    emit("s_cmp_eq_u32", L.kb, 0)
    emit("s_cbranch_scc1", ".Lfirst_block")
    _emit_previous_products(k)
    prog.label(".Lfirst_block")
    scores.emit_scores(k)
    emit("s_setprio", 0)
    emit("s_barrier")

    prog.comment("vector phase: stage the next block's loads, then softmax of this one")
    emit("s_add_u32", L.key_next, L.key0, BLOCK_N)
    emit("s_add_u32", tmp, L.kb, 1)
    emit("s_cmp_lt_u32", tmp, ln.n_blocks)
    emit("s_cbranch_scc0", ".Lno_loads")
    lds.emit_stage_loads(k, L.key_next)
    prog.label(".Lno_loads")
    emit_mfma_wait(prog)
    scores.emit_mask(k)
    p.emit_references(k)
    p.emit_codes(k)
    total.emit_rescale(k)

    prog.comment("write the staged next block into the buffers no wave reads before the next barrier")
    emit("s_add_u32", tmp, L.kb, 1)
    emit("s_cmp_lt_u32", tmp, ln.n_blocks)
    emit("s_cbranch_scc0", ".Lno_writes")
    emit("s_and_b32", tmp, tmp, 1)
    lds.emit_stage_writes(k, tmp)
    prog.label(".Lno_writes")
    emit("s_barrier")
    emit("s_add_u32", L.kb, L.kb, 1)
    emit("s_mov_b32", L.key0, L.key_next)
    emit("s_cmp_lt_u32", L.kb, ln.n_blocks)
    emit("s_cbranch_scc1", ".Lblock")

    prog.comment("the last block's row sums and P.V; group 0 then passes the barrier group 1's offset left over")
    emit("s_setprio", 1)
    emit("s_nop", 4)
    _emit_previous_products(k)
    emit("s_setprio", 0)
    emit("s_cmp_lg_u32", group, 0)
    emit("s_cbranch_scc1", ".Lepilogue")
    emit("s_barrier")
    prog.label(".Lepilogue")
    emit_mfma_wait(prog)


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
