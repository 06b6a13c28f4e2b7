"""The warp-specialized schedules of the generated Hopper kernel: FlashAttention-3's
structure around the same block math (block.py) as the serial kernel. ``"pingpong"`` (and
``"persistent"``: the same kernel, one CTA an SM) take turns at the tensor cores;
``"specialized"`` leaves the turns out (the default for MLA's Dqk 192, fastest there).

One CTA = 128 query rows of one head, 384 threads:
  warpgroup 0  producer: gives up registers (setmaxnreg 24); thread 0 loads each key
               block's K and V^T by TMA into a ring of STAGES stages, waiting for a
               stage's "free" mbarrier (one arrival per consumer warp) before reuse
  warpgroups 1, 2  consumers of 64 rows each (setmaxnreg 240); per key block j one GEMM
               phase, S(j) = Q K_j^T and P(j-1) V_{j-1}^T issued together, then the
               softmax of S(j) while the other consumer's GEMM phase runs
Ping-pong: two named barriers order the GEMM phases WG1, WG2, WG1, ... (a consumer waits
for its turn, issues, then hands the turn on), so the tensor cores work through one
warpgroup's GEMMs while the other computes its softmax instead of both waiting at once.

The arithmetic is the serial kernel's, block by block (total = total * alpha + block * beta
in the same order), so the outputs are bit-identical to it. Versions and H200 timings:
bench/PTX_NOTES.md (v11, v11b, v14, v15).
"""
from __future__ import annotations

from ..program import Program
from . import block, cta, layout
from .smem import emit_descriptor, emit_wait

PRODUCER_REGISTERS, CONSUMER_REGISTERS = 24, 240
MAX_REGISTERS = (PRODUCER_REGISTERS + 2 * CONSUMER_REGISTERS) // 3      # 168: what the launch allots
TURN_BARRIERS = (1, 2)                 # named barrier 1: consumer 1 may issue; 2: consumer 2
Q_BARRIERS = (3, 4)                    # each consumer's own 128 threads (negative descale)
CONSUMER_WARPS = 8                     # arrivals that free a stage, or the Q tiles


def emit_pingpong(prog: Program, rule: str, causal: bool, rowsum: str, turns: bool = True,
                  dqk: int = layout.HEAD_DIM) -> None:
    """The kernel's body; ``turns=False`` (schedule "specialized") leaves the ping-pong
    barriers out, so the consumers issue their GEMM phases whenever they are ready.

    Tiles of 128 rows are numbered query tile fastest, heaviest (last) first within a
    (batch, head); CTA x takes tiles x, x + nctaid.x, ...: one tile with a grid of every
    tile, or persistent with a grid of one CTA an SM. A CTA counts its K / V^T loads across
    tiles (the stage ring's position) and its tiles (the Q mbarriers' phases)."""
    emit = prog.emit
    n_stages = layout.stages("pingpong")
    c = cta.prologue(prog, causal, n_stages, n_consumers=2, dqk=dqk)
    yes = prog.reg("pred")
    emit("setp.eq.u32", yes, c.zero, 0)
    producer = prog.reg("pred")
    emit("setp.eq.u32", producer, c.wg, 0)
    # mbarriers: Q full, stages full, stages free, Q free
    ones = cta.emit_setup(prog, c, rule, rowsum, [1] + [1] * n_stages + [CONSUMER_WARPS] * (n_stages + 1),
                          writers=producer)
    c.q_free = prog.reg("u32")
    emit("add.u32", c.q_free, c.empty0, 8 * n_stages)
    c.n_m, c.tiles = prog.regs("u32", 2)
    emit("add.u32", c.n_m, c.sq, 2 * layout.BLOCK_M - 1)
    emit("shr.u32", c.n_m, c.n_m, 7)
    emit("mul.lo.u32", c.tiles, c.n_m, c.hq)
    emit("mul.lo.u32", c.tiles, c.tiles, c.batch)
    emit("bra", "PRODUCER", guard=producer)

    _emit_consumer(prog, c, rule, causal, rowsum, ones, yes, turns)
    emit("ret")
    prog.label("PRODUCER")
    _emit_producer(prog, c)
    emit("ret")


def _emit_tile_loop_head(prog: Program, c, t, label: str) -> None:
    """At ``label``: leave for {label}_DONE once tile ``t`` is past the last, else the tile's work."""
    done = prog.reg("pred")
    prog.label(label)
    prog.emit("setp.ge.u32", done, t, c.tiles)
    prog.emit("bra.div", f"{label}_DONE", guard=done)
    ty, bh = prog.regs("u32", 2)
    prog.emit("rem.u32", ty, t, c.n_m)
    prog.emit("div.u32", bh, t, c.n_m)
    prog.emit("sub.u32", ty, c.n_m, ty)
    prog.emit("sub.u32", ty, ty, 1)                       # heaviest query tile first
    cta.emit_work(prog, c, ty, bh)


def _phase_of(prog: Program, count, flip: bool = False):
    """The mbarrier parity of use number ``count`` of a barrier used once per round (a
    waiter for "free" waits for the previous round: ``flip``)."""
    phase = prog.reg("u32")
    prog.emit("and.b32", phase, count, 1)
    if flip:
        prog.emit("xor.b32", phase, phase, 1)              # a fresh barrier has completed "round -1"
    return phase


def _emit_producer(prog: Program, c) -> None:
    """Thread 0: per tile, both Q tiles once the consumers are done with the last ones, then
    its key blocks, each once its stage is free again."""
    emit = prog.emit
    emit("setmaxnreg.dec", PRODUCER_REGISTERS)
    emit("bra.div", "PRODUCER_DONE", guard=f"!{c.leader}")
    t, it, slot, j = prog.regs("u32", 4)
    emit("mov.u32", t, "%ctaid.x")
    emit("mov.u32", it, 0)
    emit("mov.u32", slot, 0)
    _emit_tile_loop_head(prog, c, t, "PRODUCE_TILE")
    emit_wait(prog, c.q_free, _phase_of(prog, it, flip=True), "WAIT_Q_FREE")
    second_q, q1 = prog.regs("u32", 2)
    emit("add.u32", second_q, c.tile_m, layout.BLOCK_M)
    emit("add.u32", q1, c.smem, c.q_bytes)
    emit("mbarrier.expect_tx", c.bar_q, 2 * c.q_bytes)
    cta.emit_q_load(prog, c, c.smem, c.tile_m, c.bar_q)
    cta.emit_q_load(prog, c, q1, second_q, c.bar_q)
    emit("mov.u32", j, 0)
    done = prog.reg("pred")
    prog.label("LOAD_LOOP")
    emit("setp.ge.u32", done, j, c.n_blocks)
    emit("bra.div", "TILE_LOADED", guard=done)
    rounds = prog.reg("u32")
    emit("shr.u32", rounds, slot, c.stages.bit_length() - 1)   # STAGES: a power of two
    emit_wait(prog, _free_bar(prog, c, slot), _phase_of(prog, rounds, flip=True), "WAIT_FREE")
    cta.emit_kv_load(prog, c, j, slot)
    emit("add.u32", j, j, 1)
    emit("add.u32", slot, slot, 1)
    emit("bra.div", "LOAD_LOOP")
    prog.label("TILE_LOADED")
    _emit_next_tile(prog, t, it)
    emit("bra.div", "PRODUCE_TILE")
    prog.label("PRODUCE_TILE_DONE")
    prog.label("PRODUCER_DONE")


def _emit_next_tile(prog: Program, t, it) -> None:
    n = prog.reg("u32")
    prog.emit("mov.u32", n, "%nctaid.x")
    prog.emit("add.u32", t, t, n)
    prog.emit("add.u32", it, it, 1)


def _emit_turn(prog: Program, c, take: bool) -> None:
    """Wait for this consumer's turn at the tensor cores (``take``), or hand it to the other."""
    if not c.turns:
        return
    if take:
        prog.emit("bar.sync.n", c.my_turn, 2 * layout.THREADS)
    else:
        prog.emit("bar.arrive.n", c.other_turn, 2 * layout.THREADS)


def _emit_release(prog: Program, c, bar) -> None:
    """One arrival per warp on the "free" mbarrier at ``bar``."""
    prog.emit("mbarrier.arrive", bar, guard=c.lane0)


def _free_bar(prog: Program, c, slot):
    """The "free" mbarrier of load number ``slot``'s stage."""
    stage, bar = prog.regs("u32", 2)
    prog.emit("and.b32", stage, slot, c.stages - 1)
    prog.emit("mad.lo.u32", bar, stage, 8, c.empty0)
    return bar


def _emit_consumer(prog: Program, c, rule: str, causal: bool, rowsum: str, ones, yes, turns: bool) -> None:
    emit = prog.emit
    emit("setmaxnreg.inc", CONSUMER_REGISTERS)
    c.my_turn, c.other_turn, q_sync = prog.regs("u32", 3)
    emit("mov.u32", c.my_turn, c.wg)                       # consumer w waits on barrier w
    emit("sub.u32", c.other_turn, 3, c.wg)
    emit("add.u32", q_sync, c.wg, Q_BARRIERS[0] - 1)
    first = prog.reg("pred")
    emit("setp.eq.u32", first, c.wg, 1)
    c.turns = turns
    if turns:
        emit("bar.arrive.n", TURN_BARRIERS[0], 2 * layout.THREADS, guard=f"!{first}")   # consumer 1 goes first
    q_tile = prog.reg("u32")
    emit("mad.lo.u32", q_tile, c.wg, c.q_bytes, c.smem)
    emit("sub.u32", q_tile, q_tile, c.q_bytes)
    dq = emit_descriptor(prog, q_tile)
    c.q_tile = q_tile
    d_ones = emit_descriptor(prog, ones)
    t, it, base = prog.regs("u32", 3)                     # base: the slot of the tile's block 0
    emit("mov.u32", t, "%ctaid.x")
    emit("mov.u32", it, 0)
    emit("mov.u32", base, 0)

    _emit_tile_loop_head(prog, c, t, "TILE")
    cta.emit_rows(prog, c, causal)
    emit_wait(prog, c.bar_q, _phase_of(prog, it), "WAIT_Q")
    cta.emit_positive_factor(prog, c, q_tile, sync=lambda: emit("bar.sync.n", q_sync, layout.THREADS))

    total, A, l = block.emit_accumulators(prog)
    j, start_n, slot, prev_slot = prog.regs("u32", 4)
    emit("mov.u32", j, 0)
    emit("mov.u32", start_n, 0)
    emit("mov.u32", slot, base)
    s = prog.regs("f32", layout.ACC)
    p_regs = [prog.regs("b32", 4) for _ in range(layout.BLOCK_N // 32)]   # P(j - 1): A of the P V^T in flight
    alpha, beta = prog.regs("f32", 2), prog.regs("f32", 2)

    def keep(sm) -> None:
        """P, alpha and beta of this block for its P V^T, issued in the next GEMM phase."""
        for k in range(len(p_regs)):
            for r in range(4):
                emit("mov.b32", p_regs[k][r], sm.p_regs[k][r])
        for half in (0, 1):
            emit("mov.f32", alpha[half], sm.alpha[half])
            emit("mov.f32", beta[half], sm.beta[half])

    def fold(o, tag: str) -> None:
        block.emit_rescale(prog, total, alpha, tag)
        block.emit_fold(prog, o, total, beta)

    def issue_pv(block_slot):
        _, v_tile, _, _ = cta.stage(prog, c, block_slot)
        return block.emit_pv_issue(prog, rowsum, p_regs, emit_descriptor(prog, v_tile), d_ones, None, yes)

    prog.comment("block 0: its GEMM phase has Q K^T alone")
    cta.emit_kv_wait(prog, c, slot, "_FIRST")
    _emit_turn(prog, c, take=True)
    cta.emit_scores(prog, c, slot, dq, s, yes, "_FIRST", wait=False)
    _emit_turn(prog, c, take=False)
    emit("wgmma.wait", 0)
    sm = block.emit_softmax(prog, c, rule, rowsum, start_n, s, d_ones, A, yes, "_FIRST")
    block.emit_row_update(prog, sm, rowsum, l, A)
    keep(sm)

    prog.comment("block j: GEMM phase S(j) + P(j - 1) V^T; softmax of S(j); fold block j - 1")
    last = prog.reg("pred")
    prog.label("BLOCK_LOOP")
    emit("mov.u32", prev_slot, slot)
    emit("add.u32", slot, slot, 1)
    emit("add.u32", j, j, 1)
    emit("add.u32", start_n, start_n, layout.BLOCK_N)
    emit("setp.ge.u32", last, j, c.n_blocks)
    emit("bra", "LAST_PV", guard=last)
    cta.emit_kv_wait(prog, c, slot, "")
    _emit_turn(prog, c, take=True)
    cta.emit_scores(prog, c, slot, dq, s, yes, "", wait=False)
    o = issue_pv(prev_slot)
    _emit_turn(prog, c, take=False)
    emit("wgmma.wait", 1)                                  # S(j); P(j - 1) V^T may still run
    sm = block.emit_softmax(prog, c, rule, rowsum, start_n, s, d_ones, A, yes, "", wait_rowsum=False)
    emit("wgmma.wait", 0)                                  # P(j - 1) V^T and block j's row sums
    _emit_release(prog, c, _free_bar(prog, c, prev_slot))
    fold(o, "")
    block.emit_row_update(prog, sm, rowsum, l, A)
    keep(sm)
    emit("bra", "BLOCK_LOOP")

    prog.label("LAST_PV")
    _emit_turn(prog, c, take=True)
    o = issue_pv(prev_slot)
    _emit_turn(prog, c, take=False)
    emit("wgmma.wait", 0)
    _emit_release(prog, c, _free_bar(prog, c, prev_slot))
    _emit_release(prog, c, c.q_free)                       # this tile's Q K^T are all done
    fold(o, "_LAST")
    cta.emit_epilogue(prog, c, total, A, l)
    emit("add.u32", base, base, c.n_blocks)
    _emit_next_tile(prog, t, it)
    emit("bra.div", "TILE")
    prog.label("TILE_DONE")
