"""E4M3 V transposed in shared memory by one warp: a block of 16 keys x 32 head-dim bytes, stored
key-major (as a KV cache holds V), rewritten as V^T rows whose 16 bytes hold those keys in
A-operand slot order (zyfa.spec.key_order.KEY_OF_SLOT), which is what P V^T's E4M3 wgmma reads.

The warp reads the block as four 8 x 8 tiles of 16-bit pairs (keys 0-7 / 8-15 x bytes 0-15 /
16-31) with ldmatrix .trans, so lane t holds, of each tile, keys 2 (t % 4) and + 1 of the byte
pair t / 4; two byte permutes a pair of tiles split the pair into one word a head-dim byte (keys
a, a + 1, a + 8, a + 9 with a = 2 (t % 4): slots 4 (t % 4) .. + 3), and stmatrix writes those
words as four 8 x 8 tiles whose rows are V^T rows. Six instructions a lane for 16 bytes, no
shared-memory gathers of single bytes. stmatrix writes through the generic proxy: a kernel whose
wgmma then reads these rows needs fence.proxy.async and a barrier between the two.

``emit_vt_transpose`` does one such block between plain row-major regions; ``emit_vt_tile`` a
warp's share of a whole tile as the kernels keep them: V key-major as TMA lands it and V^T as
P V^T's descriptor reads it, both in 128-byte rows with the 128-byte swizzle.
"""
from __future__ import annotations

from ..program import Program, Reg
from .layout import COLUMN_TILE

KEYS = 16            # keys a block (a 16-key slot group)
BYTES = 32           # head-dim bytes a block
HALF = 16            # bytes 16-31 of the key rows become V^T rows 16-31

# byte permutes of a (keys 0-7, keys 8-15) tile pair: even and odd head-dim bytes
EVEN, ODD = 0x6420, 0x7531


class _Lane:
    """What a lane addresses in a block's four 8 x 8 tiles: ldmatrix's lane l reads row l % 8 of
    tile l / 8 (tile bit 0: keys 8-15, bit 1: bytes 16-31), i.e. key ``key`` and 16-byte piece
    ``piece`` (0 / 1) of the block; stmatrix's lane l writes V^T row ``vt_row`` of it (tile i's
    row r is V^T row 2 r + (i & 1) + 16 (i >> 1))."""

    def __init__(self, prog: Program, lane: Reg):
        emit = prog.emit
        tile = prog.reg("u32")
        self.row, self.key, self.piece, self.vt_row = prog.regs("u32", 4)
        emit("shr.u32", tile, lane, 3)
        emit("and.b32", self.row, lane, 7)
        emit("and.b32", self.key, tile, 1)
        emit("mad.lo.u32", self.vt_row, self.row, 2, self.key)
        emit("mad.lo.u32", self.key, self.key, 8, self.row)
        emit("shr.u32", self.piece, tile, 1)
        emit("mad.lo.u32", self.vt_row, self.piece, HALF, self.vt_row)


def _emit_block(prog: Program, v_at: Reg, vt_at: Reg) -> None:
    """The block's transpose, given each lane's ldmatrix and stmatrix row addresses."""
    emit = prog.emit
    tiles = prog.regs("u32", 4)
    emit("ldmatrix.x4.trans", *tiles, v_at)
    words = prog.regs("u32", 4)
    for half in (0, 1):                             # bytes 0-15, 16-31
        lo, hi = tiles[2 * half], tiles[2 * half + 1]
        emit("prmt.b32", words[2 * half], lo, hi, hex(EVEN))
        emit("prmt.b32", words[2 * half + 1], lo, hi, hex(ODD))
    emit("stmatrix.x4", vt_at, *words)


def emit_vt_transpose(prog: Program, lane: Reg, v_row0: Reg, v_stride: int, vt_row0: Reg, vt_stride: int) -> None:
    """Transpose one 16-key x 32-byte block. ``v_row0``: shared address of key 0's byte 0 of the
    block (key rows ``v_stride`` bytes apart); ``vt_row0``: shared address of V^T row 0's 16 bytes
    for these keys (rows ``vt_stride`` bytes apart). ``lane``: the lane in the warp."""
    emit = prog.emit
    at = _Lane(prog, lane)
    v_at, vt_at = prog.regs("u32", 2)
    emit("mad.lo.u32", v_at, at.key, v_stride, v_row0)
    emit("mad.lo.u32", v_at, at.piece, HALF, v_at)
    emit("mad.lo.u32", vt_at, at.vt_row, vt_stride, vt_row0)
    _emit_block(prog, v_at, vt_at)


ROW = COLUMN_TILE       # bytes a row of both tiles: the 128-byte swizzle's (piece c of row r at 16 (c ^ r % 8))


def emit_vt_tile(prog: Program, lane: Reg, group: Reg, v_tile: Reg, vt_tile: Reg, keys: int) -> None:
    """One warp's share of a tile's transpose: head-dim bytes 32 ``group`` .. + 31 of ``keys`` keys
    (a multiple of 16, at most 128) of a key-major V tile at ``v_tile`` (key k's 128 bytes in row
    k, as a TMA box of 128-byte rows lands with the 128-byte swizzle) become V^T rows 32 ``group``
    .. + 31 of the V^T tile at ``vt_tile`` (row d holds byte d of the keys, piece g keys 16 g .. +
    15 in slot order, the same swizzle: what P V^T's descriptor reads). Both tiles 1024-byte
    aligned; four warps with groups 0-3 transpose a 128-byte-wide tile."""
    if keys % KEYS or not 0 < keys <= ROW:
        raise ValueError(f"keys must be a multiple of {KEYS} up to {ROW}, got {keys}")
    emit = prog.emit
    at = _Lane(prog, lane)
    # key 16 b + key's row r = key % 8, piece 2 group + piece: at 16 ((2 group + piece) ^ r), and
    # 2 group + piece = 2 group ^ piece (piece < 2); V^T row 32 group + vt_row, its piece b at
    # 16 (b ^ vt_row % 8) (32 group is a multiple of 8)
    v_row, vt_row, swz = prog.regs("u32", 3)
    emit("shl.b32", swz, group, 1)
    emit("xor.b32", swz, swz, at.piece)
    emit("xor.b32", swz, swz, at.row)
    emit("shl.b32", swz, swz, 4)
    emit("mad.lo.u32", v_row, at.key, ROW, v_tile)
    emit("add.u32", v_row, v_row, swz)
    emit("mad.lo.u32", vt_row, group, 32, at.vt_row)
    emit("and.b32", swz, vt_row, 7)
    emit("shl.b32", swz, swz, 4)
    emit("mad.lo.u32", vt_row, vt_row, ROW, vt_tile)
    v_at, vt_at, piece = prog.regs("u32", 3)
    for b in range(keys // KEYS):
        emit("add.u32", v_at, v_row, b * KEYS * ROW)
        emit("xor.b32", piece, swz, 16 * b)
        emit("add.u32", vt_at, vt_row, piece)
        _emit_block(prog, v_at, vt_at)
