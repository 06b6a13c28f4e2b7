"""Shared-memory plumbing every TMA + wgmma kernel repeats: mbarrier waits and the 64-bit
matrix descriptors of 128-byte-swizzled tiles."""
from __future__ import annotations

from ..program import Program, Reg
from .target import SWIZZLE_64B, SWIZZLE_128B, descriptor_bits


def emit_wait(prog: Program, bar: Reg, phase, label: str) -> None:
    """Spin until the mbarrier at ``bar`` completes the phase with parity ``phase``."""
    done = prog.reg("pred")
    prog.label(label)
    prog.emit("mbarrier.try_wait", done, bar, phase)
    prog.emit("bra.div", label, guard=f"!{done}")


def emit_descriptor(prog: Program, tile: Reg, row_bytes: int = 128, leading_bytes: int = 0) -> Reg:
    """The wgmma descriptor of a K-major tile at shared address ``tile``: rows of 128 bytes
    with the 128-byte swizzle (1024-aligned), or of 64 bytes with the 64-byte swizzle
    (512-aligned); the stride byte offset is 8 rows. Adding 2 steps it 32 bytes along K.
    An MN-major 16-bit tile (V as the B of P V): rows of 128 bytes are K rows, its column
    tiles ``leading_bytes`` apart; adding 128 steps it 16 rows along K."""
    base, desc = prog.regs("u64", 2)
    prog.emit("cvt.u64.u32", base, tile)
    prog.emit("shr.u64", base, base, 4)
    prog.emit("and.b64", base, base, 0x3FFF)
    swizzle = {128: SWIZZLE_128B, 64: SWIZZLE_64B}[row_bytes]
    prog.emit("or.b64", desc, base, descriptor_bits(8 * row_bytes, swizzle, leading_bytes))
    return desc
