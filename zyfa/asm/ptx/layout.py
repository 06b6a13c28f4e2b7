"""Where the generated Hopper kernel keeps things: tile sizes, schedules, the shared-memory
layout of each schedule, kernel names and parameters, and the wgmma accumulator fragment
(which row and column a thread's accumulator register holds)."""
from __future__ import annotations

BLOCK_M, BLOCK_N, HEAD_DIM = 64, 128, 128     # HEAD_DIM: one 128-byte column tile (and Dv)
HEAD_DIMS = ((128, 128), (192, 128))           # (Dqk, Dv) the kernel takes; MLA's 192 as two tiles
THREADS = 128
STAGES = 2                                  # K / V^T stages; the pipelined kernel takes 3
Q_BYTES = BLOCK_M * HEAD_DIM
ONES_BYTES = 8 * HEAD_DIM                   # 8 rows of E4M3 ones: B of the row-sum wgmma
KV_BYTES = BLOCK_N * HEAD_DIM               # one K tile or one V^T tile
ACC = BLOCK_N // 2                          # f32 accumulator registers per thread (m64n128)
# 168 registers x 128 threads x 3 CTAs fits the SM's 64K registers, and 3 x shared_bytes(STAGES)
# its 227 KB of shared memory: three CTAs per SM, so one's softmax can overlap another's wgmma.
# (rowsum="hmma" waits for its half-precision row sums before P.V, so its half2 P is dead
# before P.V's accumulator lives and it fits the same budget. Pipelined: Q K^T of the next
# block in flight during this block's softmax holds a second S, 64 registers; it takes up to
# 255, two CTAs an SM.)
REGISTER_BUDGET = 168
SCHEDULES = ("serial", "pipelined", "pingpong", "persistent", "specialized")
PERSISTENT = "persistent"     # the ping-pong kernel launched with one CTA an SM


def consumers(schedule: str) -> int:
    """Warpgroups that compute (64 query rows each) in one CTA: two in the ping-pong kernel
    (pingpong.py), which also has a producer warpgroup."""
    return 2 if schedule in ("pingpong", "persistent", "specialized") else 1


def stages(schedule: str) -> int:
    """K / V^T stages: the pipelined kernel loads block j + 2 while S(j + 1) reads j + 1; the
    ping-pong kernel's producer runs up to three blocks ahead of its consumers."""
    return {"serial": STAGES, "pipelined": 3, "pingpong": 4, "persistent": 4, "specialized": 4}[schedule]


TAIL = 64      # Dqk 192: columns 128-191 as a second tile of 64-byte rows (64-byte swizzle)


def stage_bytes(dqk: int) -> int:
    """One stage: the K tile(s) (128 keys x Dqk bytes), then V^T."""
    return BLOCK_N * dqk + KV_BYTES


def stage0(n_consumers: int, dqk: int = HEAD_DIM) -> int:
    """Byte offset of stage 0: after the Q tiles (64 rows x Dqk bytes a consumer) and the
    ones tile; 1024-aligned for Dqk 128 and 192."""
    return BLOCK_M * dqk * n_consumers + ONES_BYTES


def bar_offset(n_stages: int, n_consumers: int = 1, dqk: int = HEAD_DIM) -> int:
    """Byte offset of the mbarriers (Q's, one per stage, then the ping-pong kernel's one per
    stage that says it is free again), after the stages."""
    return stage0(n_consumers, dqk) + n_stages * stage_bytes(dqk)


def shared_bytes(schedule: str, dqk: int = HEAD_DIM) -> int:
    """Dynamic shared memory of a kernel (+ slack to align the base to 1024)."""
    n, cons = stages(schedule), consumers(schedule)
    return bar_offset(n, cons, dqk) + 8 * (1 + n * (2 if cons > 1 else 1)) + 1024


def threads(schedule: str) -> int:
    return THREADS * (1 + consumers(schedule)) if consumers(schedule) > 1 else THREADS


PARAMS = [(".align 64 .b8", "q_map[128]"), (".align 64 .b8", "k_map[128]"), (".align 64 .b8", "vt_map[128]"),
          (".align 64 .b8", "q_tail_map[128]"), (".align 64 .b8", "k_tail_map[128]"),
          (".u64", "out_ptr"), (".u64", "lse_ptr"), (".u64", "fac_ptr"), (".u64", "vd_ptr"),
          (".u32", "seqlen_q"), (".u32", "seqlen_k"), (".u32", "heads"), (".u32", "kv_heads"), (".u32", "batch")]


def kernel_name(rule: str, causal: bool, rowsum: str = "alu", schedule: str = "serial", dqk: int = HEAD_DIM) -> str:
    return (f"zyfa_attn_fp8_d{dqk}_{rule}_{'causal' if causal else 'full'}_rowsum_{rowsum}"
            + ("" if schedule == "serial" else f"_{schedule}"))


def acc_row_half(i: int) -> int:
    """0 for accumulator registers of row g, 1 for row g + 8."""
    return (i % 4) // 2


def acc_column(i: int) -> int:
    """Column of accumulator register i, less the thread's 2q."""
    return 8 * (i // 4) + i % 2
