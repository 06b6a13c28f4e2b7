"""The generated FP8 prefill attention kernel for sm_90a (head dims 128/128 and MLA's
192/128): the whole algorithm of ``zyfa.spec.reference.fp8_attention_spec``. This module is the
entry point (attention_kernel) and the one-warpgroup schedules; layout.py says where things
are, cta.py does a CTA's setup, loads and stores, block.py one key block's math, and
pingpong.py the warp-specialized schedules.

Serial schedule (one CTA = one warpgroup = 64 query rows of one head; key blocks of 128 =
the spec's block_n; grid (query tiles, batch * heads), heaviest query tiles first):

  prologue   TMA loads of the Q tile and the first K / V^T block; block bounds of the
             unmasked part and the masked diagonal band (bottom-right causal, tails)
  per block  thread 0 starts the TMA loads of the next block into the other stage;
             S = Q K^T (4 x wgmma m64n128k32, both operands in shared memory; 6 for Dqk 192);
             mask S (band and tail blocks only); row max over the quad, taken on S
             (m = max(S) c: c > 0, made so by flipping Q's signs for a negative descale);
             lazy reference A; P codes of y = fma(S, c, -m) by the exact rule (MUFU.EX2,
             the hardware's E4M3 rounding) or a lean rule (FMA pipe + magic number);
             row sum of the rounded P (float32 on the ALUs, or half-precision wgmmas
             with float32 accumulation, "hmma"); P packed into the A operand;
             block = P V^T (4 x wgmma, A from registers) in a fresh accumulator;
             total = total * alpha + block * beta (two-level accumulation; the multiply
             only when a reference moved)
  epilogue   out = total / l * v_descale in BF16, LSE = ln2 (A + log2 l - 8)

V^T arrives with its keys permuted inside each 16-key group (zyfa.spec.key_order.KEY_OF_SLOT) so P
goes from the QK^T accumulator to the A operand without moving between threads.
``schedule="pipelined"`` issues the next block's Q K^T before this block's softmax (v8).
Versions, predictions and H200 measurements: bench/PTX_NOTES.md.
"""
from __future__ import annotations

from ...spec.rules import HALF_RULES
from ..program import Program
from .block import emit_accumulators, emit_block
from .cta import (
    emit_epilogue,
    emit_kv_load,
    emit_positive_factor,
    emit_prefetch,
    emit_q_load,
    emit_scores,
    emit_setup,
    prologue,
)

# the kernel's public face: callers and tests read the layout's names here too
from .layout import (  # noqa: F401
    ACC,
    BLOCK_M,
    BLOCK_N,
    HEAD_DIM,
    HEAD_DIMS,
    PARAMS,
    PERSISTENT,
    REGISTER_BUDGET,
    SCHEDULES,
    TAIL,
    THREADS,
    consumers,
    kernel_name,
    shared_bytes,
    stages,
    threads,
)
from .lean_p import PTX_RULES
from .smem import emit_descriptor, emit_wait
from .target import module, program

ROWSUMS = ("mma", "alu", "hmma")
# the lean and half rules, bit-exact to the spec, and exact (MUFU.EX2 + the hardware's E4M3
# rounding: the spec's codes but within MUFU's error of a rounding midpoint)
ATTENTION_RULES = PTX_RULES + ("exact",)
HMMA_RULES = HALF_RULES + ("exact",)        # the rules whose P pairs become half2 A operands


def attention_kernel(rule: str = "lean_cubic", causal: bool = True, rowsum: str = "alu",
                     arch: str = "sm_90a", schedule: str = "serial", dqk: int = HEAD_DIM) -> tuple[str, str]:
    """(name, PTX) of the FP8 attention kernel (Dqk ``dqk`` 128 or 192, Dv 128) for one P
    rule and mask kind.

    ``rowsum``: the row sums of the rounded P from the codes on the ALUs in float32 ("alu",
    2 instructions a score, the spec's precision), from half-precision wgmmas with float32
    accumulation ("hmma", exact and half rules: the same sums) or from FP8 wgmmas against a
    tile of ones ("mma"; the tensor cores' truncating accumulation costs ~1e-3).
    ``schedule``: "serial" (one warpgroup a CTA, each block's GEMMs waited for in turn);
    "pipelined": Q K^T of block j + 1 is issued before the softmax of block j, so the
    tensor cores compute it meanwhile (a second S in registers, three K / V^T stages);
    "pingpong": a producer warpgroup and two consumer warpgroups of 64 rows that take turns
    at the tensor cores (pingpong.py; rowsum "hmma" or "alu"); "persistent": the same kernel
    launched with one CTA an SM; "specialized": the same warpgroups without the turns.

    Parameters: TMA maps of q (B, Sq, Hq, 128) and k (B, Sk, Hkv, 128) with boxes of 64 and
    128 rows, and of V^T (B * Hkv, 128, Sk padded to 16) with keys permuted per 16-key
    group and boxes of 128 x 128; out (B, Sq, Hq, 128) BF16; lse (B, Hq, Sq) float32;
    fac (B, Hkv) float32 = q_descale * k_descale * softmax_scale * log2(e); v_descale
    (B, Hkv, 128) float32; seqlen_q, seqlen_k, heads, kv_heads, batch. Grid (ceil(Sq / 64),
    B * Hq) for one warpgroup a CTA; for the ping-pong and specialized kernels a line of
    CTAs that take tiles of 128 rows in turn (one CTA a tile, or persistent: one an SM);
    threads(schedule) threads, shared_bytes(schedule) of dynamic shared memory.
    """
    if rule not in ATTENTION_RULES:
        raise ValueError(f"the generated kernel implements the P rules {ATTENTION_RULES}, got {rule!r}")
    if rowsum not in ROWSUMS:
        raise ValueError(f"rowsum must be one of {ROWSUMS}, got {rowsum!r}")
    if rowsum == "hmma" and rule not in HMMA_RULES:
        raise ValueError(f"rowsum 'hmma' takes the P pairs of a rule in {HMMA_RULES}, not {rule!r}")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if (dqk, HEAD_DIM) not in HEAD_DIMS:
        raise ValueError(f"the generated kernel takes head dims {HEAD_DIMS}, got ({dqk}, {HEAD_DIM})")
    if consumers(schedule) > 1 and rowsum == "mma":
        raise ValueError("the ping-pong and specialized kernels take rowsum 'hmma' or 'alu'")
    if schedule == PERSISTENT:                     # the same kernel; only the launch differs
        schedule = "pingpong"
    name = kernel_name(rule, causal, rowsum, schedule, dqk)
    prog = program()
    shared = [".extern .shared .align 1024 .b8 zyfa_smem[];"]
    if consumers(schedule) > 1:
        from .pingpong import MAX_REGISTERS, emit_pingpong
        emit_pingpong(prog, rule, causal, rowsum, turns=schedule == "pingpong", dqk=dqk)
        return name, module(name, PARAMS, prog, arch, shared, f".maxnreg {MAX_REGISTERS}")
    _emit_one_warpgroup(prog, rule, causal, rowsum, schedule == "pipelined", dqk)
    return name, module(name, PARAMS, prog, arch, shared)


def _emit_one_warpgroup(prog: Program, rule: str, causal: bool, rowsum: str, pipelined: bool, dqk: int) -> None:
    """The serial and pipelined kernels: one warpgroup a CTA, thread 0 loads."""
    emit = prog.emit
    c = prologue(prog, causal, stages("pipelined" if pipelined else "serial"), dqk=dqk)

    prog.comment("thread 0: barriers, then the Q tile and the first K / V^T block")
    yes = prog.reg("pred")
    emit("setp.eq.u32", yes, c.zero, 0)
    ones = emit_setup(prog, c, rule, rowsum, [1] * (1 + c.stages))
    emit("bra.div", "LOADS_STARTED", guard=f"!{c.leader}")
    emit("mbarrier.expect_tx", c.bar_q, c.q_bytes)
    emit_q_load(prog, c, c.smem, c.start_m, c.bar_q)
    c.q_tile = c.smem
    emit_kv_load(prog, c, c.zero)
    if pipelined:                                  # the first two blocks before the loop
        second, one = prog.reg("pred"), prog.reg("u32")
        emit("setp.gt.u32", second, c.n_blocks, 1)
        emit("bra.div", "LOADS_STARTED", guard=f"!{second}")
        emit("mov.u32", one, 1)
        emit_kv_load(prog, c, one)
    prog.label("LOADS_STARTED")
    emit_wait(prog, c.bar_q, 0, "WAIT_Q")
    emit_positive_factor(prog, c)
    dq = emit_descriptor(prog, c.smem)
    d_ones = emit_descriptor(prog, ones)

    total, A, l = emit_accumulators(prog)
    j, start_n = prog.regs("u32", 2)
    emit("mov.u32", j, 0)
    emit("mov.u32", start_n, 0)

    if pipelined:
        _emit_pipelined_loop(prog, c, rule, rowsum, dq, d_ones, total, A, l, yes, j, start_n)
    else:
        _emit_serial_loop(prog, c, rule, rowsum, dq, d_ones, total, A, l, yes, j, start_n)

    emit_epilogue(prog, c, total, A, l)
    emit("ret")


def _emit_serial_loop(prog, c, rule, rowsum, dq, d_ones, total, A, l, yes, j, start_n) -> None:
    """Per block: prefetch the next block; S = Q K^T, waited for; the softmax and P V^T."""
    emit = prog.emit
    s = prog.regs("f32", ACC)
    next_j, more = prog.reg("u32"), prog.reg("pred")
    prog.label("BLOCK_LOOP")
    emit("add.u32", next_j, j, 1)
    emit_prefetch(prog, c, next_j, "")
    emit_scores(prog, c, j, dq, s, yes, "")
    emit("wgmma.wait", 0)
    emit_block(prog, c, rule, rowsum, j, start_n, s, d_ones, total, A, l, yes)
    emit("bar.sync", 0)                           # every warp is done with this stage
    emit("mov.u32", j, next_j)
    emit("add.u32", start_n, start_n, BLOCK_N)
    emit("setp.lt.u32", more, j, c.n_blocks)
    emit("bra", "BLOCK_LOOP", guard=more)


def _emit_pipelined_loop(prog, c, rule, rowsum, dq, d_ones, total, A, l, yes, j, start_n) -> None:
    """S(0) before the loop; per block j: prefetch block j + 2, wait for S(j), issue
    S(j + 1) into the other S registers, then block j's softmax and P V^T (whose wait also
    covers S(j + 1)). Unrolled twice so the two S register sets alternate."""
    emit = prog.emit
    s_regs = (prog.regs("f32", ACC), prog.regs("f32", ACC))
    emit_scores(prog, c, j, dq, s_regs[0], yes, "_FIRST")
    ahead, next_j = prog.regs("u32", 2)
    has_next, more = prog.reg("pred"), prog.reg("pred")
    prog.label("BLOCK_LOOP")
    for half, (cur, nxt) in enumerate((s_regs, s_regs[::-1])):
        tag = f"_{half}"
        emit("add.u32", ahead, j, 2)
        emit_prefetch(prog, c, ahead, tag)
        emit("wgmma.wait", 0)                     # S(j) is complete
        emit("add.u32", next_j, j, 1)
        emit("setp.lt.u32", has_next, next_j, c.n_blocks)
        emit("bra", f"NEXT_ISSUED{tag}", guard=f"!{has_next}")      # uniform
        emit_scores(prog, c, next_j, dq, nxt, yes, tag)
        prog.label(f"NEXT_ISSUED{tag}")
        # the masked and unmasked blocks as separate code: the mask writes new registers,
        # never the scores' (a wgmma accumulator while S(j + 1) is in flight)
        unmasked = prog.reg("pred")
        emit("setp.lt.u32", unmasked, start_n, c.band_start)
        emit("bra", f"UNMASKED{tag}", guard=unmasked)
        emit_block(prog, c, rule, rowsum, j, start_n, cur, d_ones, total, A, l, yes, tag + "M",
                    masked=True, split_pv=True)
        emit("bra", f"BLOCK_DONE{tag}")
        prog.label(f"UNMASKED{tag}")
        emit_block(prog, c, rule, rowsum, j, start_n, cur, d_ones, total, A, l, yes, tag + "U",
                    masked=False, split_pv=True)
        prog.label(f"BLOCK_DONE{tag}")
        emit("bar.sync", 0)                       # every warp is done with block j's stage
        emit("mov.u32", j, next_j)
        emit("add.u32", start_n, start_n, BLOCK_N)
        emit("setp.lt.u32", more, j, c.n_blocks)
        emit("bra", "BLOCK_LOOP" if half else "LOOP_DONE", guard=more if half else f"!{more}")
    prog.label("LOOP_DONE")
