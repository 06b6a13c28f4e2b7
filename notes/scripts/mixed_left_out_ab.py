"""Lab A/B (not for the package), for run 47: the routed BF16 mixed batch with its decode
sequences' tiles left out of the prefill launch's order (the package since session m:
Packed.written_elsewhere) against the same launch running them as one-key tiles (before; run
46 measured that at 0.642 ms median as CUDA graphs, 0.630 with the widened window, separate
calls 0.627) and against separate calls. Prediction: left out 0.615-0.625 ms as graphs (the
512 one-key tiles at ~3-5 us an SM-slot each, 132 SMs), at or under separate calls (same
launches, the routed call's decode writes through views). Timed in turns, 5 rounds, as calls
and as CUDA graphs; the profiler's device time a call; routed outputs compared bit for bit."""
import dataclasses

import torch

import zyfa
from ab_common import bf16_mixed_batch, calls_and_graphs_in_turns      # notes/scripts, on the path as a script
from zyfa.asm.ptx import kernels
from zyfa.bench.cases import MIXED_KEYS, MIXED_QUERIES

q, k, v, base, (dec, pre, (q_dec, k_dec, v_dec, lens), (q_pre, k_pre, v_pre, cpq, cpk)) = bf16_mixed_batch()


ORIG_TILE_ORDER = kernels._tile_order


def tiles_run(layout, packed, *args, **kw):
    """kernels._tile_order as before session m: the written-elsewhere sequences' tiles listed."""
    if packed is not None:
        packed = dataclasses.replace(packed, written_elsewhere=())
    return ORIG_TILE_ORDER(layout, packed, *args, **kw)


def use(tile_order):
    kernels._tile_order = tile_order


def routed(tile_order):
    def call():
        use(tile_order)
        return zyfa.flash_attn_varlen_func(q, k, v, **base)
    return call


def separate():
    use(ORIG_TILE_ORDER)
    zyfa.flash_attn_with_kvcache(q_dec, k_dec, v_dec, cache_seqlens=lens, causal=True)
    return zyfa.flash_attn_varlen_func(q_pre, k_pre, v_pre, cpq, cpk, max(MIXED_QUERIES), max(MIXED_KEYS), causal=True)


calls = {"routed, left out": routed(ORIG_TILE_ORDER), "routed, tiles run": routed(tiles_run), "separate calls": separate}
outs = {nm: fn() for nm, fn in calls.items()}
names = list(calls)
first = {nm: o[0] if isinstance(o, tuple) else o for nm, o in outs.items()}
print("routed outputs equal, left out / run:", torch.equal(first[names[0]], first[names[1]]))
calls_and_graphs_in_turns(calls)
kernels._tile_order = ORIG_TILE_ORDER
