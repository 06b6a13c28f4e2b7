"""Register-fragment layouts of sm_90a wgmma, and how P moves from the QK^T accumulator
into the A operand of P.V without leaving its thread.

The documented layouts (PTX ISA, "wgmma register fragments"), for thread t of a warpgroup
(warp w = t / 32, lane = t % 32, group g = lane / 4, q = lane % 4):

  f32 accumulator m64nN:  register 4j + e      -> row 16w + g,     column 8j + 2q + e
                          register 4j + 2 + e  -> row 16w + g + 8, column 8j + 2q + e
  8-bit A operand m64k32: register a, byte i   -> row 16w + g + 8 (a % 2), column 16 (a // 2) + 4q + i

A thread's accumulator holds, in each 16-column group, columns 2q, 2q+1, 8+2q, 9+2q; the A
operand wants 4q..4q+3 in those places. Instead of moving bytes between threads, P is packed
in accumulator order and V^T's keys are permuted to match: A-operand slot s of a 16-key group
multiplies key ``KEY_OF_SLOT[s]`` (the host writes V^T in that order, zyfa.spec.key_order.hopper_vt).
Or the other way round (Layout.slot_keys): K's rows are loaded so that accumulator column
KEY_OF_SLOT[s] holds key s (zyfa.spec.key_order.slot_order_rows), and V^T stays in key order.
"""
from __future__ import annotations

from ...spec.key_order import KEY_OF_SLOT


def acc_row_half(i: int) -> int:
    """0 for accumulator registers of row g, 1 for row g + 8."""
    return (i % 4) // 2


def acc_column(i: int) -> int:
    """Column of accumulator register i, less the thread's 2q."""
    return 8 * (i // 4) + i % 2


def acc_key(i: int, slot_keys: bool) -> int:
    """The key (within the block) of accumulator register i, less the thread's key_lanes(q)
    part: its column, or with K's rows in slot order the slot that column feeds."""
    if not slot_keys:
        return acc_column(i)
    j = i // 4                                    # 8-column block: 16-key group j // 2, half j % 2
    return 16 * (j // 2) + 2 * (j % 2) + i % 2


def key_lanes(slot_keys: bool) -> int:
    """What a thread's q adds to its keys: 2q (columns 2q, 2q + 1), slot order 4q (slots 4q..4q+3)."""
    return 4 if slot_keys else 2


def accumulator_position(thread: int, reg: int) -> tuple[int, int]:
    """(row, column) of accumulator register ``reg`` of ``thread`` (m64nN, f32)."""
    warp, lane = divmod(thread, 32)
    g, q = divmod(lane, 4)
    return 16 * warp + g + 8 * acc_row_half(reg), acc_column(reg) + 2 * q


def a_operand_position(thread: int, reg: int, byte: int) -> tuple[int, int]:
    """(row, k) of byte ``byte`` of A-operand register ``reg`` (m64k32, 8-bit types)."""
    warp, lane = divmod(thread, 32)
    g, q = divmod(lane, 4)
    return 16 * warp + g + 8 * (reg % 2), 16 * (reg // 2) + 4 * q + byte


def p_sources(k_step: int) -> list[list[int]]:
    """For the A operand of P.V k-step ``k_step`` (keys 32 k_step .. +31): per A register,
    the four accumulator registers whose codes fill its bytes 0..3."""
    regs = []
    for a in range(4):
        row_half, group = a % 2, a // 2          # +8 rows; second 16-key group
        j0 = 4 * k_step + 2 * group               # accumulator column blocks j0 and j0 + 1
        # byte i sits in slot 4q + i, which multiplies key KEY_OF_SLOT[i] + 2q of the group
        regs.append([4 * j0 + _register_of(KEY_OF_SLOT[i], row_half) for i in range(4)])
    return regs


def _register_of(column: int, row_half: int) -> int:
    """The accumulator register, of a 16-column group's eight, that holds ``column`` (less
    the thread's 2q) in row half ``row_half``."""
    return next(r for r in range(8) if acc_column(r) == column and acc_row_half(r) == row_half)
