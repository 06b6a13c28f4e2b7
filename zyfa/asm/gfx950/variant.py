"""What one generated gfx950 attention kernel is: the variant asked for (lean P rule, causal or
full, head dims, reference rule), the sizes that follow from it, and the tile constants every
stage shares."""
from __future__ import annotations

import dataclasses

from ...spec.key_order import GFX950_BLOCK
from ...spec.shapes import HEAD_DIMS as SPEC_HEAD_DIMS
from ..program import Program
from .lean_p import LEAN_RULES

QUERIES = 32                         # queries a wave (an MFMA's 32 columns)
BLOCK_N = GFX950_BLOCK               # keys a block: the spec's V^T byte order is laid out in these
GROUP_WAVES, GROUPS = 4, 2
WAVES = GROUP_WAVES * GROUPS         # 256 queries a workgroup share each K/V block in LDS
# the spec's query/key dims, each in slices of 64 (192: MLA's); which pairs fit a wave's
# registers, attention.fits says
HEAD_DIMS = tuple(sorted({qk for qk, _ in SPEC_HEAD_DIMS}))
VALUE_DIMS = (32, 64, 128)           # one, two or four 32-column O tiles (32, outside the spec's pairs: the emulator's one-tile cases)
REF_RULES = ("block", "block_pow2")

HAZARD_NOPS = (15, 1)       # after an MFMA 32x32 before its result is read (as LLVM writes it)
NEG_INF = 0xFF800000
E4M3_ONES = 0x38383838      # four E4M3 1.0
E8M0_ONE = 127              # the scale byte of 2^0


@dataclasses.dataclass(frozen=True)
class Variant:
    """One kernel's parameters; constructing it checks them (ValueError)."""
    rule: str                # the lean P rule (zyfa.spec.rules.LEAN_RULES)
    causal: bool             # bottom-right causal mask
    head_dim: int            # D of q and k
    value_dim: int           # Dv of v and out
    ref_rule: str            # the block's P reference: "block" or "block_pow2"

    def __post_init__(self):
        if self.rule not in LEAN_RULES:
            raise ValueError(f"generated P rules are {LEAN_RULES}, got {self.rule!r}")
        if self.ref_rule not in REF_RULES:
            raise ValueError(f"generated reference rules are {REF_RULES}, got {self.ref_rule!r}")
        # value dim 96 (three 32-column O tiles) left output channels 64..95 at zero (found by
        # tests/verify/test_fuzz.py): refused until the O tiling handles an odd tile count
        if self.head_dim not in HEAD_DIMS or self.value_dim not in VALUE_DIMS:
            raise ValueError(f"head_dim must be one of {HEAD_DIMS} and value_dim one of {VALUE_DIMS}, "
                             f"got {self.head_dim}, {self.value_dim}")

    @property
    def name(self) -> str:
        return (f"zyfa_attn_gfx950_{self.rule}_{self.ref_rule}_d{self.head_dim}_{self.value_dim}_"
                f"{'causal' if self.causal else 'full'}")

    @property
    def pow2(self) -> bool:
        """block_pow2: the scaled MFMA applies the block's weight, sums kept in AGPRs."""
        return self.ref_rule == "block_pow2"

    @property
    def chunks(self) -> int:
        """64-dim slices of Q and K: one MFMA each per 32-key tile."""
        return self.head_dim // 64

    @property
    def dv_tiles(self) -> int:
        """32-column tiles of O^T."""
        return self.value_dim // 32

    @property
    def k_bytes(self) -> int:
        """One K buffer in LDS: 64 keys x D bytes."""
        return BLOCK_N * self.head_dim

    @property
    def v_bytes(self) -> int:
        """One V^T buffer in LDS: Dv rows x 64 bytes."""
        return BLOCK_N * self.value_dim

    @property
    def v_lds(self) -> int:
        """Where the V^T buffers start: after the two K buffers."""
        return 2 * self.k_bytes

    @property
    def k_cols(self) -> int:
        """16-byte columns of a key row each wave of a group stages."""
        return self.head_dim // 16 // GROUP_WAVES

    @property
    def v_rows(self) -> int:
        """V^T rows a lane stages: rows lane, lane + 64 (Dv 128)."""
        return max(self.value_dim // 64, 1)


def emit_mfma_wait(prog: Program) -> None:
    """The wait states between an MFMA 32x32 and a read of its result (HAZARD_NOPS)."""
    for nops in HAZARD_NOPS:
        prog.emit("s_nop", nops)
