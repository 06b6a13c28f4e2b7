"""The records the attention kernel's stages share: registers by what they hold, filled by the
set-up (``setup``, ``lds``, ``total.emit_running_state``) and read by the stages (``scores``,
``p``, ``pv``, ``total``, ``epilogue``) and the schedule (``attention``).

Registers are numbered in the order they are allocated, so the set-up allocates them in one
fixed order; the records only name them."""
from __future__ import annotations

import dataclasses
import itertools
from typing import Iterator

from ..program import Program, Reg
from .lean_p import Constants
from .target import span
from .variant import Variant


@dataclasses.dataclass
class Args:
    """Kernel arguments (SGPRs), the pointers offset to this workgroup's head (vt's by
    ``setup.emit_coordinates``, once Sk padded to 64 is known)."""
    ptrs: list[Reg]          # q, k, vt, vd: 64-bit pointer pairs
    outs: list[Reg]          # out, lse, fac, kv_head: 64-bit pointer pairs
    wg: Reg                  # workgroup id x: the 256-query tile
    tid: Reg                 # VGPR: the work-item id
    sq: Reg                  # seqlen_q
    sk: Reg                  # seqlen_k
    fac: Reg                 # the spec's factor c of this head (> 0)
    bkv: Reg                 # batch * Hkv + kv head
    q_stride: Reg            # bytes between rows of q (Hq D), k (Hkv D), out (Hq Dv 4)
    k_stride: Reg
    o_stride: Reg
    n: Reg                   # scratch
    lo: Reg                  # add_product's scratch: a 64-bit product
    hi: Reg

    def pointer(self, i: int) -> str:
        """Pointer argument i (0 q, 1 k, 2 vt, 3 vd, 4 out, 5 lse) as an SGPR pair."""
        regs = self.ptrs + self.outs
        return span(regs[2 * i:2 * i + 2])


@dataclasses.dataclass
class Lanes:
    """A lane's coordinates and the workgroup's limits."""
    s_tiles: list[list[Reg]]  # S^T's two 32-key tiles; free before the loop, so the
    qload: Reg                # prologue's temporaries live in s_tiles[1][4:8]:
    qoff: Reg                 #   the q row a lane loads, its byte offset,
    t32: Reg                  #   32 half
    row: Reg                  # l % 32: the lane's query within the wave
    half: Reg                 # l // 32: which half of the wave
    t16: Reg                  # 16 half
    lane: Reg                 # l % 64
    w16: Reg                  # 16 (wave % 4): this wave's 16-byte column when staging
    query: Reg                # the lane's query
    partner: Reg              # ds_bpermute address of lane l ^ 32 (the same query)
    limit: Reg                # the last key the lane's query sees
    neg_inf: Reg              # -inf, for the mask
    group: Reg                # SGPR: the wave's group, 0 or 1 (wave-uniform)
    q0: Reg                   # the workgroup's first query
    sk_last: Reg              # seqlen_k - 1
    n_blocks: Reg             # key blocks this workgroup visits
    band: Reg                 # the first key block that needs a mask
    skp: Reg                  # seqlen_k padded to 64: V^T's row stride
    tmp: Reg                  # SGPR scratch


@dataclasses.dataclass
class QOperand:
    """Q as the B operand of S^T = K Q^T."""
    dim: Reg                  # SGPR: D (a multiplier for K's LDS rows)
    slices: list[list[Reg]]   # 8 VGPRs per 64 head dims


@dataclasses.dataclass
class Lds:
    """LDS addressing, the staging registers and the loop's block counters."""
    k_read: Reg               # where this lane reads its K operand (buffer 0)
    v_read: Reg               # where it reads its V^T operand (buffer 0)
    k_stage: Reg              # where it writes the key it stages
    vg_stage: Reg             # where it loads its V^T row from (global, key 0)
    v_stage: Reg              # where it writes that row
    addr: Reg                 # an address being formed
    sk64: Reg                 # SGPR: 64 V^T rows further in global memory
    key_next: Reg             # SGPR: the next block's first key
    buf: Reg                  # SGPR: a buffer's byte offset
    kb: Reg                   # SGPR: the key block
    key0: Reg                 # SGPR: its first key
    staged: list[Reg]         # the next block's bytes between global load and LDS write
    exec_saved: list[Reg]     # exec while lanes past V^T's rows are off
    serial: Iterator[int] = dataclasses.field(default_factory=itertools.count)   # label numbers


@dataclasses.dataclass
class Running:
    """The state carried across key blocks (AGPRs for total and l under block_pow2)."""
    total: list[list[Reg]]    # O^T per 32-value tile
    o: list[Reg]              # block: P.V's fresh accumulator; block_pow2: the running row sums
    l_sum: Reg                # the row sum l (block_pow2: o[0])
    A: Reg                    # the lazy reference


@dataclasses.dataclass
class Scores:
    """S^T = K Q^T of one key block, and the mask's registers."""
    tiles: list[list[Reg]]    # two 32-key tiles (Lanes.s_tiles)
    q: list[list[Reg]]        # Q's slices (QOperand.slices)
    k: list[list[Reg]]        # K's slices, read from LDS (dead in the vector phase)
    kbase: Reg                # the block's first key + 4 half
    kvalid: Reg               # a score's key

    @property
    def values(self) -> list[Reg]:
        """The lane's 32 scores: register r of tile t is key 32 t + 8 (r // 4) + 4 half + r % 4."""
        return self.tiles[0] + self.tiles[1]


@dataclasses.dataclass
class Softmax:
    """Row max, references and lean P of one block."""
    consts: Constants         # the lean rule's constant pairs
    sel_pair: Reg             # SGPR v_perm selectors packing codes: two bytes,
    sel_halves: Reg           #   then two halves
    m: Reg                    # the row max max(S) c
    other: Reg                # the partner lane's max; then the threshold A + 8
    a_new: Reg                # A'
    alpha: Reg                # 2^(A - A')
    beta: Reg                 # block: 2^(m - A'); block_pow2: d
    y: list[Reg]              # fma(S, c, -r) of two scores; then packing scratch
    c_pair: list[Reg]         # c twice (packed FP32 takes no SGPR pairs of one value)
    neg_r_pair: list[Reg]     # -r twice
    alpha_pair: list[Reg]     # alpha twice
    beta_pair: list[Reg]      # beta twice
    scratch: list[list[Reg]]  # emit_p_codes's six pairs
    quad: list[Reg]           # four scores' codes before packing


@dataclasses.dataclass
class Products:
    """The operands of the row sums and O^T = Vp^T P^T."""
    ones: list[Reg]           # A operand of E4M3 ones: P^T's row sums
    p: list[Reg]              # P's codes as the B operand
    v: list[Reg]              # V^T's slice as the A operand (dead in the vector phase)
    p_scale: Reg              # block_pow2: P's E8M0 scale byte 127 - d
    one_scale: Reg            # the E8M0 scale of 1


@dataclasses.dataclass
class Kernel:
    """Everything the stages share."""
    prog: Program
    v: Variant
    args: Args
    lanes: Lanes
    lds: Lds
    running: Running
    scores: Scores
    soft: Softmax
    products: Products

    def emit(self, op: str, *operands) -> None:
        self.prog.emit(op, *operands)
