"""Where the generated Hopper kernel keeps things: tile sizes, the two schedules' shapes and
shared-memory layouts, kernel names and parameters, and the wgmma accumulator fragment
(which row and column a thread's accumulator register holds)."""
from __future__ import annotations

import dataclasses

BLOCK_M, BLOCK_N, HEAD_DIM = 64, 128, 128     # HEAD_DIM: one 128-byte column tile (and Dv)
HEAD_DIMS = ((128, 128), (192, 128))           # (Dqk, Dv) the kernel takes; MLA's 192 as two tiles
TAIL = 64      # Dqk 192: columns 128-191 as a second tile of 64-byte rows (64-byte swizzle)
THREADS = 128                               # one warpgroup
Q_BYTES = BLOCK_M * HEAD_DIM                # one 128-byte column tile of Q
ONES_BYTES = 8 * HEAD_DIM                   # the ones tile: B of the half-precision row-sum wgmma
KV_BYTES = BLOCK_N * HEAD_DIM               # one K tile or one V^T tile
ACC = BLOCK_N // 2                          # f32 accumulator registers per thread (m64n128)
# 168 registers x 128 threads x 3 CTAs fits the SM's 64K registers, and 3 serial kernels'
# shared memory its 227 KB: three CTAs per SM, so one's softmax can overlap another's wgmma.
# (The half-precision row sums are waited for before P.V, so their half2 P is dead before
# P.V's accumulator lives and they fit the same budget.)
REGISTER_BUDGET = 168


@dataclasses.dataclass(frozen=True)
class Layout:
    """A kernel's shape and its shared memory, from the aligned base:
    Q tiles | ones tile | stages of K tile(s), V^T | mbarriers."""
    dqk: int          # Q / K columns: 128, or MLA's 192 (a 128-byte and a 64-byte column tile)
    consumers: int    # warpgroups that compute, 64 query rows each (2: plus a producer warpgroup)
    stages: int       # K / V^T stages (a power of two: the stage is the block's low bits)

    @property
    def specialized(self) -> bool:
        """A producer warpgroup and two consumers (specialized.py), else one warpgroup."""
        return self.consumers > 1

    @property
    def q_bytes(self) -> int:
        """One consumer's Q tiles: 64 rows x Dqk bytes."""
        return BLOCK_M * self.dqk

    @property
    def stage_bytes(self) -> int:
        """One stage: the K tile(s) (128 keys x Dqk bytes), then V^T."""
        return BLOCK_N * self.dqk + KV_BYTES

    @property
    def stage0(self) -> int:
        """Byte offset of stage 0, after the Q tiles and the ones tile; 1024-aligned."""
        return self.q_bytes * self.consumers + ONES_BYTES

    @property
    def bar_offset(self) -> int:
        """Byte offset of the mbarriers, after the stages."""
        return self.stage0 + self.stages * self.stage_bytes

    @property
    def barriers(self) -> int:
        """Q full and one "full" per stage; the specialized kernel adds one "free" per stage
        and Q free (its producer waits on them before reusing a buffer)."""
        return 1 + self.stages + (self.stages + 1 if self.specialized else 0)

    @property
    def shared_bytes(self) -> int:
        """Dynamic shared memory of the kernel (+ slack to align the base to 1024)."""
        return self.bar_offset + 8 * self.barriers + 1024

    @property
    def threads(self) -> int:
        return THREADS * (1 + self.consumers) if self.specialized else THREADS


def layout_for(dqk: int) -> Layout:
    """The schedule measured fastest on the H200 for the head dims (bench/PTX_NOTES.md
    v11-v15). Dqk 128: one warpgroup a CTA ("serial"), three CTAs an SM, two stages (the
    warp-specialized kernels were within +-3% at 16K-32K and 8% slower at batch 4 4K).
    MLA's Dqk 192, whose K tiles leave room for two such CTAs only: the producer / two-consumer
    kernel ("specialized", +23%), its producer up to three blocks ahead in four stages."""
    return Layout(dqk, 2, 4) if dqk > HEAD_DIM else Layout(dqk, 1, 2)


PARAMS = [(".align 64 .b8", "q_map[128]"), (".align 64 .b8", "k_map[128]"), (".align 64 .b8", "vt_map[128]"),
          (".align 64 .b8", "q_tail_map[128]"), (".align 64 .b8", "k_tail_map[128]"),
          (".u64", "out_ptr"), (".u64", "lse_ptr"), (".u64", "fac_ptr"), (".u64", "vd_ptr"),
          (".u32", "seqlen_q"), (".u32", "seqlen_k"), (".u32", "heads"), (".u32", "kv_heads"), (".u32", "batch")]


def kernel_name(rule: str, causal: bool, dqk: int = HEAD_DIM) -> str:
    return f"zyfa_attn_fp8_d{dqk}_{rule}_{'causal' if causal else 'full'}"


def acc_row_half(i: int) -> int:
    """0 for accumulator registers of row g, 1 for row g + 8."""
    return (i % 4) // 2


def acc_column(i: int) -> int:
    """Column of accumulator register i, less the thread's 2q."""
    return 8 * (i // 4) + i % 2
