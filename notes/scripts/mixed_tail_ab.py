"""Lab A/B (not for the package), for run 44: where the routed BF16 mixed batch's 2.4% over
separate calls goes (run 43: 0.630 against 0.615 ms). The routed call's prefill launch lists
the two 4K chunks' tiles and then the 16 decode sequences' one-key tiles (512 at 32 heads), and
kernels._order_words re-sorts the last TAIL_PER_SM tiles an SM most keys first: in the routed
launch that window (528 tiles) is nearly all one-key tiles, so the chunks' light last tiles are
not re-sorted as they are when the chunks run alone. Variant: the window widened by the tiles
that see fewer keys than a tile has rows (near-empty; none in a batch without such sequences).
A CPU model of the launch (132 SMs drawing in order, a tile costing its key blocks plus one)
gives makespans of 290 (as is), 280 (widened) against a mean of 279; the chunks alone 276.
Timed in turns, 5 rounds: routed as is, routed widened, separate calls, as calls and as CUDA
graphs of the calls (the GPU's work alone); the profiler's device time a call; outputs compared."""
import functools

import torch

import zyfa
from ab_common import bf16_mixed_batch, calls_and_graphs_in_turns      # notes/scripts, on the path as a script
from zyfa.asm.ptx import kernels
from zyfa.bench.cases import MIXED_KEYS, MIXED_QUERIES

q, k, v, base, (dec, pre, (q_dec, k_dec, v_dec, lens), (q_pre, k_pre, v_pre, cpq, cpk)) = bf16_mixed_batch()
MAIN_ORDER = kernels._order_words


def widened_order(q_lens, k_lens, rows, per_head, heads, tail):
    """kernels._order_words with the re-sorted window widened by the near-empty tiles."""
    ql, kl = torch.tensor(q_lens), torch.tensor(k_lens)
    tiles = (ql + rows - 1) // rows
    small = int((tiles * heads)[kl < rows].sum())        # the tiles of sequences with fewer keys than rows
    return MAIN_ORDER(q_lens, k_lens, rows, per_head, heads, tail + small)


_pinned = {}        # a graph capture's order words (pinned), one cache an order, kept alive for the replays


def use(order):
    """The launches' tile order from ``order`` (eager: its device copy; captured: its pinned copy)."""
    if kernels._order_words is not order:
        kernels._order_words = order
        kernels._order_on_device.cache_clear()
    kernels._pinned_words = _pinned.setdefault(order, functools.lru_cache(maxsize=16)(
        lambda *key: order(*key).pin_memory()))


def routed(order):
    def call():
        use(order)
        return zyfa.flash_attn_varlen_func(q, k, v, **base)
    return call


def separate():
    use(MAIN_ORDER)                 # the package's order for the chunks' own launch
    zyfa.flash_attn_with_kvcache(q_dec, k_dec, v_dec, cache_seqlens=lens, causal=True)
    return zyfa.flash_attn_varlen_func(q_pre, k_pre, v_pre, cpq, cpk, max(MIXED_QUERIES), max(MIXED_KEYS), causal=True)


calls = {"routed, as is": routed(MAIN_ORDER), "routed, widened": routed(widened_order), "separate calls": separate}
outs = {nm: fn() for nm, fn in calls.items()}
names = list(calls)
first = {nm: o[0] if isinstance(o, tuple) else o for nm, o in outs.items()}
print("routed outputs equal across orders:", torch.equal(first[names[0]], first[names[1]]))
calls_and_graphs_in_turns(calls)
kernels._order_words = MAIN_ORDER
