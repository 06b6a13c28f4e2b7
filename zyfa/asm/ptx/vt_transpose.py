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
"""
from __future__ import annotations

from ..program import Program, Reg

KEYS = 16            # keys a block (a 16-key slot group)
BYTES = 32           # head-dim bytes a block
HALF = 16            # bytes 16-31 of the key rows become V^T rows 16-31

# byte permutes of a (keys 0-7, keys 8-15) tile pair: even and odd head-dim bytes
EVEN, ODD = 0x6420, 0x7531


def emit_vt_transpose(prog: Program, lane: Reg, v_row0: Reg, v_stride: int, vt_row0: Reg, vt_stride: int) -> None:
    """Transpose one 16-key x 32-byte block. ``v_row0``: shared address of key 0's byte 0 of the
    block (key rows ``v_stride`` bytes apart); ``vt_row0``: shared address of V^T row 0's 16 bytes
    for these keys (rows ``vt_stride`` bytes apart). ``lane``: the lane in the warp."""
    emit = prog.emit
    tile, row, addr = prog.regs("u32", 3)
    # ldmatrix: lane l addresses row l % 8 of tile l / 8; tile bit 0 picks keys 8-15, bit 1 bytes 16-31
    emit("shr.u32", tile, lane, 3)
    emit("and.b32", row, lane, 7)
    key, col = prog.regs("u32", 2)
    emit("and.b32", key, tile, 1)
    emit("mad.lo.u32", key, key, 8, row)
    emit("shr.u32", col, tile, 1)
    emit("mul.lo.u32", col, col, HALF)
    emit("mad.lo.u32", addr, key, v_stride, v_row0)
    emit("add.u32", addr, addr, col)
    tiles = prog.regs("u32", 4)
    emit("ldmatrix.x4.trans", *tiles, addr)
    words = prog.regs("u32", 4)
    for half in (0, 1):                             # bytes 0-15, 16-31
        lo, hi = tiles[2 * half], tiles[2 * half + 1]
        emit("prmt.b32", words[2 * half], lo, hi, hex(EVEN))
        emit("prmt.b32", words[2 * half + 1], lo, hi, hex(ODD))
    # stmatrix: tile i's row r is V^T row 2 r + (i & 1) + 16 (i >> 1)
    d, out = prog.regs("u32", 2)
    emit("and.b32", d, tile, 1)
    emit("mad.lo.u32", d, row, 2, d)
    emit("add.u32", d, d, col)                      # the second half's rows: HALF further
    emit("mad.lo.u32", out, d, vt_stride, vt_row0)
    emit("stmatrix.x4", out, *words)
