"""The serial schedule of the generated Hopper kernel (the default for head dims 128 / 128):
one CTA = one warpgroup = 64 query rows of one head, three CTAs an SM; key blocks of 128 =
the spec's block_n; grid (query tiles, batch * heads), heaviest query tiles first.

  prologue   TMA loads of the Q tile and the first K / V^T block; block bounds of the
             unmasked part and the masked diagonal band (bottom-right causal, tails)
  per block  thread 0 starts the TMA loads of the next block into the other stage;
             S = Q K^T (4 x wgmma m64n128k32, both operands in shared memory), waited for;
             the block step (block.py): mask, row max, P codes, row sums, P V^T and the
             two-level accumulation
  epilogue   out = total / l * v_descale in BF16, LSE = ln2 (A + log2 l - 8)
"""
from __future__ import annotations

from ..program import Program
from .block import BLOCK_LOOPS, emit_accumulators, emit_block
from .scores import emit_positive_factor, emit_q_descriptors, emit_scores
from .softmax import emit_row_sum_parts
from .cta import emit_prologue
from .epilogue import emit_epilogue
from .int8_qk import emit_block_factors, emit_positive_rows
from .layout import Layout
from .loads import emit_kv_load, emit_prefetch, emit_q_load, emit_setup
from .smem import emit_descriptor, emit_wait
from .window import emit_band_test, emit_below_again, emit_first_start


def emit_serial(prog: Program, rule: str, causal: bool, layout: Layout, running: bool = False) -> None:
    emit = prog.emit
    c, rows = emit_prologue(prog, causal, layout)
    thread, tile, shared = c.thread, c.tile, c.shared
    prog.comment("thread 0: barriers, then the Q tile and the first K / V^T block")
    ones = emit_setup(prog, c, rule, [1] * (1 + layout.stages), running=running)
    emit("bra.div", "LOADS_STARTED", guard=f"!{thread.leader}")
    emit("mbarrier.expect_tx", shared.bar_q, layout.q_bytes)
    emit_q_load(prog, c, shared.base, tile.start_m)
    emit_kv_load(prog, c, thread.zero)
    prog.label("LOADS_STARTED")
    emit_wait(prog, shared.bar_q, 0, "WAIT_Q")
    if not layout.int8_qk:                    # int8_qk: rows' factors a block (emit_positive_rows)
        emit_positive_factor(prog, c, rows)
    q_descs = emit_q_descriptors(prog, c, shared.base, emit_descriptor(prog, shared.base, layout.qk_tiles[0][1]))
    d_ones = emit_descriptor(prog, ones) if ones is not None else None

    total, A, l = emit_accumulators(prog, layout.dv // 2)
    j, start_n = prog.regs("u32", 2)
    emit("mov.u32", j, 0)
    emit_first_start(prog, tile, start_n)

    prog.comment("per block: prefetch the next block; S = Q K^T, waited for; the softmax and P V^T;")
    prog.comment("two copies of the loop: the blocks below the band (no mask test, no masked-row")
    prog.comment("guard), then the band's")
    s = prog.regs("b32" if layout.int8_qk else "f32", layout.s_regs)     # int8_qk: int32 scores, then float
    next_j, more = prog.reg("u32"), prog.reg("pred")
    emit_band_test(prog, rows, start_n, more)               # a window's left band: masked too
    emit("bra", "BAND", guard=more)
    for tag, masked in BLOCK_LOOPS:
        prog.label(f"BLOCK_LOOP{tag}")
        emit("add.u32", next_j, j, 1)
        emit_prefetch(prog, c, next_j, tag)
        emit_scores(prog, c, q_descs, j, s, tag)
        facs = emit_block_factors(prog, rows, j) if layout.int8_qk else None
        emit("wgmma.wait", 0)
        if layout.int8_qk:
            emit_positive_rows(prog, s, facs, tag)
        emit_block(prog, c, rows, rule, j, start_n, s, d_ones, total, A, l, tag, masked, deferred=True, facs=facs,
                   running=running)
        emit("bar.sync", 0)                       # every warp is done with this stage
        emit("mov.u32", j, next_j)
        emit("add.u32", start_n, start_n, layout.block_n)
        if masked:
            emit_below_again(prog, rows, start_n, f"BLOCK_LOOP{BLOCK_LOOPS[0][0]}")   # a window's left band ends
            emit("setp.lt.u32", more, j, tile.n_blocks)
        else:                                     # below the band: its start_n < band_start <= Sk
            emit("setp.lt.u32", more, start_n, rows.band_start)
        emit("bra", f"BLOCK_LOOP{tag}", guard=more)
        if not masked:
            prog.label("BAND")
            emit("setp.ge.u32", more, j, tile.n_blocks)
            emit("bra", "BLOCKS_DONE", guard=more)
    prog.label("BLOCKS_DONE")

    emit_row_sum_parts(prog, l, rule, running)
    emit_epilogue(prog, c, rows, total, A, l)
    emit("ret")
