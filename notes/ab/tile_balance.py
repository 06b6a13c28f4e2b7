"""A CPU model of how a persistent packed launch spreads its query tiles over the SMs.

It made the case for the tile counter (Layout.tile_counter, merged 2026-12-02): the packed
(varlen) launches had run one CTA an SM, each striding over the tile slots (batch entry,
head, query tile) with the query tile fastest and heaviest first, skipping slots past their
sequence's queries; they now draw tiles from a counter in an order the host lists. This
model gives each tile a cost of its
causal key blocks plus a fixed per-tile cost, and reports the busiest SM's load over the
mean (1.0: perfect balance) for that static striding and for dynamic assignment (each SM
takes the next slot when it finishes, as an atomic tile counter would give).

    python notes/ab/tile_balance.py
"""
from __future__ import annotations

import heapq
import math
import random

from zyfa.bench.cases import VARLEN_LENGTHS

SMS, ROWS, BLOCK_N = 132, 128, 128        # H200; a 16-bit d128 tile: 2 consumers x 64 rows, 128 keys
TILE_COST, EMPTY_COST = 1.0, 0.05         # in key blocks: a tile's fixed work; a skipped slot


def slots(lengths: list[int], heads: int, tile_slowest: bool = False):
    """The launch's slots in order: (batch entry, query tile), query tile fastest within a
    (batch entry, head) and heaviest first (the kernel's order), or query tile slowest."""
    per_head, bh = math.ceil(max(lengths) / ROWS), len(lengths) * heads
    for t in range(per_head * bh):
        if tile_slowest:
            yield (t % bh) // heads, per_head - 1 - t // bh
        else:
            yield t // per_head // heads, per_head - 1 - t % per_head


def cost(lengths: list[int], b: int, tile: int) -> float:
    m = lengths[b]
    if tile * ROWS >= m:
        return EMPTY_COST
    return math.ceil(min((tile + 1) * ROWS, m) / BLOCK_N) + TILE_COST    # bottom-right causal, Sq = Sk


def imbalance(loads: list[float]) -> float:
    return max(loads) / (sum(loads) / len(loads))


def static(lengths, heads, tile_slowest=False) -> float:
    loads = [0.0] * SMS
    for i, (b, tile) in enumerate(slots(lengths, heads, tile_slowest)):
        loads[i % SMS] += cost(lengths, b, tile)
    return imbalance(loads)


def dynamic(lengths, heads, tile_slowest=False) -> float:
    heap = [(0.0, i) for i in range(SMS)]
    for b, tile in slots(lengths, heads, tile_slowest):
        load, i = heapq.heappop(heap)
        heapq.heappush(heap, (load + cost(lengths, b, tile), i))
    return imbalance([load for load, _ in heap])


if __name__ == "__main__":
    rng = random.Random(0)
    batches = {"zyfa bench varlen (16 seqs, 64K)": list(VARLEN_LENGTHS),
               "dense 4 x 16K": [16384] * 4,
               "8 x 1K..8K": [rng.randint(1024, 8192) for _ in range(8)],
               "32 x 64..2048": [rng.randint(64, 2048) for _ in range(32)]}
    print(f"{'batch (32 heads)':34s} static  dynamic  dynamic, query tile slowest")
    for name, lengths in batches.items():
        print(f"{name:34s} {static(lengths, 32):6.3f}  {dynamic(lengths, 32):7.3f}  {dynamic(lengths, 32, True):7.3f}")
