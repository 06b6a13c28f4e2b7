"""Where the generated Hopper kernel keeps things: tile sizes, the two schedules' shapes and
shared-memory layouts for E4M3 and 16-bit (BF16 / FP16) inputs, kernel names and parameters
(the wgmma accumulator fragment, which row and column a thread's accumulator register holds,
is fragments.py's)."""
from __future__ import annotations

import dataclasses
import functools

from ...spec.constants import KEY_BLOCK
from ...spec.rules import sums_unrounded
from ...spec.shapes import HEAD_DIMS_BY_QK

# BLOCK_N: the spec's key block (a reference and an accumulator each), so that the kernel's
# blocks are the spec's; HEAD_DIM: one 128-byte column tile (and Dv)
BLOCK_M, BLOCK_N, HEAD_DIM = 64, KEY_BLOCK, 128
# (Dqk, Dv) the FP8 kernel takes, every pair of the spec's: d64 in one 64-byte column tile
# (64-byte swizzle); MLA's 192 as two tiles; d256 with V^T of 256 rows, P V^T in two halves
# of 128 columns
HEAD_DIMS = HEAD_DIMS_BY_QK
# (Dqk, Dv) of the 16-bit kernel, every pair of the spec's too: rows in 128-byte column tiles;
# d256 in 64-key blocks (K and V tiles of 128 keys would take 64 KB each)
HEAD_DIMS_16 = HEAD_DIMS_BY_QK
DTYPES = {"e4m3": 1, "bf16": 2, "f16": 2}      # input type -> bytes an element


def fp8_dv(dqk: int) -> int:
    """The FP8 kernel's Dv for its Dqk (HEAD_DIMS)."""
    dv = dict(HEAD_DIMS).get(dqk)
    if dv is None:
        raise ValueError(f"the generated kernel takes head dims {HEAD_DIMS}, got Dqk {dqk}")
    return dv


COLUMN_TILE = 128                              # bytes: the 128-byte swizzle's row
TAIL = 64      # Dqk 192: columns 128-191 as a second tile of 64-byte rows (64-byte swizzle)
THREADS = 128                               # one warpgroup
Q_BYTES = BLOCK_M * HEAD_DIM                # one 128-byte column tile of Q
ONES_BYTES = 8 * HEAD_DIM                   # the ones tile: B of the half-precision row-sum wgmma
OUT_REGS = HEAD_DIM // 2                    # f32 registers a thread of one P V^T's output (m64n128)
# 168 registers x 128 threads x 3 CTAs fits the SM's 64K registers, and 3 serial kernels'
# shared memory its 227 KB: three CTAs per SM, so one's softmax can overlap another's wgmma.
# (The half-precision row sums are waited for before P.V, so their half2 P is dead before
# P.V's accumulator lives and they fit the same budget.)
REGISTER_BUDGET = 168
# d64's serial kernel needs at most 129 (ptxas, unconstrained) and fits 128 without spills: capped
# there, four CTAs share an SM (64K registers / 4 / 128 threads) within 4 x 39 KB of shared memory
REGISTER_CAP_D64 = 128
SHARED_LIMIT = 227 * 1024                   # dynamic shared memory a CTA may opt into (sm_90)


@dataclasses.dataclass(frozen=True)
class Layout:
    """A kernel's shape and its shared memory, from the aligned base:
    Q tiles | ones tile (E4M3) | stages of K tile(s), V^T (E4M3) or V (16-bit) | mbarriers.
    Rows of Q, K and 16-bit V lie in column tiles of 128 bytes (E4M3 Dqk 192: then one of 64),
    each tile's rows contiguous."""
    dqk: int          # Q / K columns: 128, or MLA's 192; 16-bit: also 64
    consumers: int    # warpgroups that compute, 64 query rows each (2: plus a producer warpgroup)
    stages: int       # K / V stages
    dtype: str = "e4m3"   # "e4m3": V arrives as V^T; "bf16" / "f16": V as stored (MN-major B)
    dv: int = HEAD_DIM    # V columns
    block_n: int = BLOCK_N    # keys a block (16-bit d256: 64, so that two stages fit)
    packed: bool = False  # a packed (varlen) batch: each sequence's rows from cu_seqlens (PACKED_PARAMS)
    int8_qk: bool = False  # Q and K int8 (the INT8 Q.K^T mode), factors a row and a key block (INT8_PARAMS)
    window: bool = False   # a sliding window, its (left, right) parameters (WINDOW_PARAMS; window.py)
    slot_keys: bool = False  # dense: K's rows in P's slot order (loads.emit_k_rows), V^T natural

    @property
    def s_regs(self) -> int:
        """f32 registers a thread of a block's S (m64n``block_n``: two rows of block_n / 4)."""
        return self.block_n // 2

    @property
    def p_steps(self) -> int:
        """E4M3 P V^T's k-steps of 32 keys a block."""
        return self.block_n // 32

    @property
    def elem_bytes(self) -> int:
        return DTYPES[self.dtype]

    @property
    def is_fp8(self) -> bool:
        return self.elem_bytes == 1

    @property
    def specialized(self) -> bool:
        """A producer warpgroup and two or three consumers (specialized.py), else one warpgroup."""
        return self.consumers > 1

    @property
    def qk_tiles(self) -> list[tuple[int, int]]:
        """(first byte, width in bytes) of each column tile of a Q / K row."""
        row = self.dqk * self.elem_bytes
        return [(c, min(COLUMN_TILE, row - c)) for c in range(0, row, COLUMN_TILE)]

    @property
    def v_tiles(self) -> list[tuple[int, int]]:
        """16-bit: (first byte, width) of each column tile of a V row (E4M3 V^T: one tile)."""
        return [(c, COLUMN_TILE) for c in range(0, self.dv * self.elem_bytes, COLUMN_TILE)]

    @property
    def q_bytes(self) -> int:
        """One consumer's Q tiles: 64 rows x Dqk elements."""
        return BLOCK_M * self.dqk * self.elem_bytes

    @property
    def k_bytes(self) -> int:
        """One stage's K tile(s): 128 keys x Dqk elements."""
        return self.block_n * self.dqk * self.elem_bytes

    @property
    def fold_under_s(self) -> bool:
        """Block references in the pipelined consumer: block j - 2's P V^T folded while S(j) runs,
        not block j - 1's after the P V^T wait. E4M3 at MLA's Dqk 192, dense, no window: where it
        measured faster (docs/decisions.md; d128's long layout and the INT8 kernel measured slower)."""
        return self.is_fp8 and not self.int8_qk and self.dqk == 192 and not (self.packed or self.window)

    @property
    def v_boxes(self) -> int:
        """E4M3: a block's V^T in boxes of 128 keys (a 128-byte swizzled row each; a block of
        more keys takes a second box, its keys past the block unused); 16-bit: 1."""
        return -(-self.block_n // COLUMN_TILE) if self.is_fp8 else 1

    @property
    def v_bytes(self) -> int:
        """One stage's V^T (its boxes) or V (block_n keys x Dv elements)."""
        keys = self.v_boxes * COLUMN_TILE if self.is_fp8 else self.block_n
        return keys * self.dv * self.elem_bytes

    @property
    def stage_bytes(self) -> int:
        """One stage: the K tile(s), then V^T or V."""
        return self.k_bytes + self.v_bytes

    @property
    def ones_bytes(self) -> int:
        """The ones tile of the FP8 kernel's half-precision row sums."""
        return ONES_BYTES if self.is_fp8 else 0

    @property
    def stage0(self) -> int:
        """Byte offset of stage 0, after the Q tiles and the ones tile; 1024-aligned."""
        return self.q_bytes * self.consumers + self.ones_bytes

    @property
    def bar_offset(self) -> int:
        """Byte offset of the mbarriers, after the stages."""
        return self.stage0 + self.stages * self.stage_bytes

    @property
    def split_kv(self) -> bool:
        """16-bit kernels: K and V of a stage have their own "full" and "free" mbarriers, so
        K(j) is released once S(j) is done and the producer reloads it a block earlier than
        if it waited for P V(j) too (FlashAttention-3 keeps K and V in separate pipelines)."""
        return not self.is_fp8 and self.specialized

    @property
    def barriers(self) -> int:
        """Q full and one "full" per stage; the specialized kernel adds one "free" per stage
        and Q free (its producer waits on them before reusing a buffer); split_kv adds V's
        "full" and "free" per stage."""
        return 1 + self.stages + (self.stages + 1 if self.specialized else 0) + (2 * self.stages if self.split_kv else 0)

    @property
    def pins_softmax(self) -> bool:
        """16-bit kernels: each block's row sums are stored to a scratch word before P V(j - 1)
        is waited for, which keeps ptxas from hoisting that wait above the softmax, where the
        softmax would never overlap P V (measured on the H200: docs/decisions.md)."""
        return not self.is_fp8

    @property
    def early_pv_wait(self) -> bool:
        """16-bit kernels up to Dqk 192: P V(j - 1) is waited for after a few of block j's
        exponentials, not after its whole softmax, and the output is rescaled by block j - 1's
        alpha after S(j) is issued and before P(j - 1) V, so that packing P and the rescale no
        longer run with no GEMM in flight (FlashAttention-3's order). Measured faster on the
        H200 up to Dqk 192, slower at d256 (docs/decisions.md)."""
        return not self.is_fp8 and self.dqk <= 192

    @property
    def turns(self) -> bool:
        """16-bit kernels with two consumers, the early P V wait and Dqk >= 128 (d128, MLA,
        dense and packed): the consumers take turns to issue their GEMM phases (named barriers,
        FlashAttention-3's scheduler barrier), so that one's softmax runs under the other's
        GEMMs. Measured faster on the H200 with the block loop in two copies (consumer16),
        not alone; slower for packed d64 with two consumers (docs/decisions.md)."""
        return self.early_pv_wait and self.consumers == 2 and self.dqk >= 128

    @property
    def scratch_offset(self) -> int:
        """A word per consumer thread after the mbarriers (pins_softmax)."""
        return self.bar_offset + 8 * self.barriers

    @property
    def tile_counter(self) -> bool:
        """A packed batch's persistent CTAs take their tiles as they finish the last, in an
        order the host lists (the non-empty tiles, sequence by sequence) after a counter in global
        memory (the producer draws the next and hands it to the consumers in shared memory): a
        fixed stride over tiles of unequal length left some SMs 8-14% busier than the mean
        (a CPU model of the launch), and slots of a grid sized by the longest sequence are mostly
        empty (75% on the bench's batch)."""
        return self.packed and self.specialized

    @property
    def tile_word_offset(self) -> int:
        """The shared word that hands the consumers their next tile (tile_counter), after the
        scratch words."""
        return self.scratch_offset + (4 * THREADS * self.consumers if self.pins_softmax else 0)

    @property
    def _o_region(self) -> int:
        """Byte offset of a packed 16-bit kernel's own output staging (o_staging), 1024-aligned
        after the tile word."""
        return -(-(self.tile_word_offset + (16 if self.tile_counter else 0)) // 1024) * 1024

    @property
    def o_staging(self) -> tuple[int, int] | None:
        """16-bit warp-specialized kernels: where each consumer's 64 output rows pass through
        shared memory on their way out (stmatrix, then each row's 16-byte pieces side by side,
        instead of a transpose in registers by 16 shuffles and 48 selects a 32 columns), as
        (offset of the first consumer's rows, bytes from one consumer's to the next): a dense
        launch's own Q tiles (a CTA's one tile is done with Q after its last S), a packed
        launch's own region where it fits (its producer loads the next tile's Q while the
        consumers finish the last). None: the shuffle epilogue (FP8, and packed d128 / d192 /
        d256, whose stages leave no room)."""
        if self.is_fp8 or not self.specialized:
            return None
        if not self.packed:
            return 0, self.q_bytes
        rows = BLOCK_M * self.dv * self.elem_bytes
        if self._o_region + self.consumers * rows + 1024 > SHARED_LIMIT:
            return None
        return self._o_region, rows

    @property
    def shared_bytes(self) -> int:
        """Dynamic shared memory of the kernel (+ slack to align the base to 1024)."""
        end = self.tile_word_offset + (16 if self.tile_counter else 0)
        staging = self.o_staging
        if staging is not None and self.packed:
            end = staging[0] + self.consumers * staging[1]
        return end + 1024

    @property
    def threads(self) -> int:
        return THREADS * (1 + self.consumers) if self.specialized else THREADS


# the fast mode's key blocks (E4M3, running reference, exact rule) by Dqk, in three stages:
# FlashAttention-3's tile at MLA's 192 / 128 (S 80 registers). d128's long layout stays at 128
# keys: its 224-key blocks measured slower at 32 heads 32K (docs/decisions.md)
WIDE_KEYS = {192: 160}

# FP8 d128 from this many keys: the producer / two-consumer kernel, whose overlap of one
# consumer's softmax with the other's GEMMs pays only on long rows (H200: docs/decisions.md)
LONG_KEYS = 16384


def long_keys(dqk: int, dv: int, seqlen_k: int, packed: bool = False) -> bool:
    """Whether an FP8 or INT8 Q.K^T call takes layout_for's ``long`` layout: d128, dense, seqlen_k >= LONG_KEYS."""
    return (dqk, dv) == (HEAD_DIM, HEAD_DIM) and not packed and seqlen_k >= LONG_KEYS


def wide_blocks(p_rule: str, ref_rule: str, window: bool) -> bool:
    """Whether MLA's layout takes blocks of WIDE_KEYS: the fast mode with the exact rule (each
    thread sums its exponentials; a lean rule's P beside the wider S spills), no window (window.py
    counts blocks by shifts); dense batches (layout_for)."""
    return ref_rule == "running" and sums_unrounded(p_rule, ref_rule) and not window


def key_block(dqk: int, dv: int, seqlen_k: int, p_rule: str, ref_rule: str, packed: bool = False,
              window: bool = False) -> int:
    """Keys a block of the generated E4M3 kernel for a call: the spec's block_n of its references."""
    return layout_for(dqk, dv=dv, packed=packed, long=long_keys(dqk, dv, seqlen_k, packed),
                      wide=wide_blocks(p_rule, ref_rule, window)).block_n


@functools.cache                  # asked at every launch; a Layout is immutable
def layout_for(dqk: int, dtype: str = "e4m3", dv: int = HEAD_DIM, packed: bool = False,
               int8_qk: bool = False, long: bool = False, wide: bool = False) -> Layout:
    """The schedule measured fastest on the H200 for the head dims (the measurements:
    docs/decisions.md). E4M3 Dqk 128: one warpgroup a CTA ("serial"), three CTAs an SM, two
    stages (the warp-specialized kernels measured no faster on short rows; see ``long``); E4M3 d64 the
    same, its rows 64 bytes. MLA's Dqk 192, whose K tiles leave room for two such CTAs only:
    the producer / two-consumer kernel ("specialized"), its producer up to three blocks ahead
    in four stages.
    ``long`` (long_keys): E4M3 d128 in the specialized kernel, four stages, whose overlap of one
    consumer's softmax with the other's GEMMs pays from 16K keys. ``wide`` (wide_blocks): MLA's
    dense layout in key blocks of WIDE_KEYS, three stages.
    E4M3 d256: the specialized kernel, three stages of 64 KB; its consumers take each block
    in turn (S, softmax, P V^T in two halves), the output's 128 registers leaving no room
    for the next S beside P V^T.
    16-bit inputs: the specialized kernel with as many stages as fit, up to four (K and V
    tiles twice the bytes: 64 KB a stage at d128, which fits three); at d64 three consumers
    (192-row tiles, FlashAttention-3's shape there): a 64-row block's GEMM phase, half of
    d128's, is shorter than a consumer's softmax, so two left the tensor cores idle.
    ``int8_qk`` (int8 Q and K, E4M3 V^T): the E4M3 kernel's schedule for the head dims and
    ``long``, dense batches."""
    if int8_qk:
        if dtype != "e4m3" or (dqk, dv) not in HEAD_DIMS or packed:
            raise ValueError(f"the INT8 Q.K^T kernel takes head dims {HEAD_DIMS}, dense, got ({dqk}, {dv})"
                             f"{' packed' if packed else ''}")
        return dataclasses.replace(layout_for(dqk, dv=dv, long=long), int8_qk=True)
    if dtype != "e4m3":
        block_n = 64 if dqk > 192 else BLOCK_N
        consumers = 3 if dqk == 64 and not packed else 2
        for stages in (4, 3, 2):
            layout = Layout(dqk, consumers, stages, dtype, dv, block_n, packed)
            if layout.shared_bytes <= SHARED_LIMIT:
                return layout
        raise ValueError(f"no 16-bit layout fits head dims ({dqk}, {dv})")
    if long:
        if not long_keys(dqk, dv, LONG_KEYS, packed):
            raise ValueError(f"the long layout is E4M3 d128's, dense; got ({dqk}, {dv}){' packed' if packed else ''}")
        return Layout(dqk, 2, 4, dv=dv)
    if dv > HEAD_DIM:                  # d256: stages of 64 KB, as many as fit (three)
        for stages in (4, 3, 2):
            layout = Layout(dqk, 2, stages, dv=dv, packed=packed)
            if layout.shared_bytes <= SHARED_LIMIT:
                return layout
    if dqk > HEAD_DIM:
        return Layout(dqk, 2, 3, block_n=WIDE_KEYS[dqk]) if wide and not packed else Layout(dqk, 2, 4, packed=packed)
    return Layout(dqk, 1, 2, dv=dv, packed=packed)


# v_map: E4M3 V^T, or 16-bit V; the tail maps: E4M3 Dqk 192 only (16-bit tiles are all 128 bytes)
PARAMS = [(".align 64 .b8", "q_map[128]"), (".align 64 .b8", "k_map[128]"), (".align 64 .b8", "v_map[128]"),
          (".align 64 .b8", "q_tail_map[128]"), (".align 64 .b8", "k_tail_map[128]"),
          (".u64", "out_ptr"), (".u64", "lse_ptr"), (".u64", "fac_ptr"), (".u64", "vd_ptr"),
          (".u32", "seqlen_q"), (".u32", "seqlen_k"), (".u32", "heads"), (".u32", "kv_heads"), (".u32", "batch")]


# a packed batch's kernel adds, per sequence (int32, batch entries; cu_q batch + 1): its first
# query row, first key row in k (16-bit: and v), key count, first key in FP8 V^T; and where
# the LSE of query row r of sequence s, head h lies: h * lse_head_stride + cu_q[s] *
# lse_row_scale + r (a packed batch's (1, Hq, total_q): total_q, 1; a dense batch run as
# equal sequences, (B, Hq, Sq): Sq, Hq). seqlen_q / seqlen_k are then the longest lengths.
PACKED_PARAMS = [(".u64", "cu_q_ptr"), (".u64", "k_start_ptr"), (".u64", "k_len_ptr"), (".u64", "v_start_ptr"),
                 (".u32", "lse_head_stride"), (".u32", "lse_row_scale")]


# tile_counter: int32s in global memory, the counter (zero at launch) and then the tile order
# (kernels._tile_order: a tile a word), and the number of tiles listed
TILE_COUNTER_PARAMS = [(".u64", "tile_order_ptr"), (".u32", "tile_draws")]


# int8_qk: fac_ptr is then the rows' factors (B, Hq, Sq) float32, q_descale * softmax_scale *
# log2(e) (the spec's row factor), and kfac_ptr k's descales a block of 128 keys (B, Hkv,
# ceil(Sk / 128)) float32; a score's factor c = row factor * block descale, as the spec forms it
INT8_PARAMS = [(".u64", "kfac_ptr")]


# window: FlashAttention's window_size (left, right), query row i sees keys i + o - left ..
# i + o + right (o = seqlen_k - seqlen_q, per sequence in a packed batch); the host passes
# more than seqlen_q + seqlen_k for an unbounded side (kernels.window_args), right 0 for causal.
# Parameters rather than a specialization a size: a model's window sizes vary by layer, and
# they cost a few prologue instructions a tile
WINDOW_PARAMS = [(".u32", "window_left"), (".u32", "window_right")]


def params_for(layout: Layout) -> list:
    return (PARAMS + (PACKED_PARAMS if layout.packed else [])
            + (TILE_COUNTER_PARAMS if layout.tile_counter else []) + (INT8_PARAMS if layout.int8_qk else [])
            + (WINDOW_PARAMS if layout.window else []))


# the references the E4M3 kernels implement: per block (the fold), or the running max (the fast mode)
REF_RULES = ("block", "running")


def _mask_name(causal: bool, window: bool) -> str:
    """A windowed kernel takes its mask from its parameters (causal: right 0)."""
    return "window" if window else "causal" if causal else "full"


def kernel_name(rule: str, causal: bool, dqk: int = HEAD_DIM, packed: bool = False, int8_qk: bool = False,
                long: bool = False, ref_rule: str = "block", window: bool = False, slot_keys: bool = False) -> str:
    return (f"zyfa_attn_{'int8qk' if int8_qk else 'fp8'}_d{dqk}_{rule}_{_mask_name(causal, window)}"
            f"{'_packed' if packed else ''}{'_long' if long else ''}{'' if ref_rule == 'block' else '_' + ref_rule}"
            f"{'_slotk' if slot_keys else ''}")


def kernel_name_16(dtype: str, causal: bool, dqk: int, dv: int, packed: bool = False, window: bool = False) -> str:
    return f"zyfa_attn_{dtype}_d{dqk}_{dv}_{_mask_name(causal, window)}{'_packed' if packed else ''}"
