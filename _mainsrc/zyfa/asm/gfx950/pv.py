"""The P.V stage of one key block: row sums and O.

Row sums of the rounded P by one MFMA of E4M3 ones against P^T, and O^T = Vp^T P^T per 32
value columns, V^T's slices read from LDS. block_pow2: v_mfma_scale_f32_32x32x64_f8f6f4 adds
straight into the running sums, P's E8M0 scale applying the block's weight 2^-d: no second
accumulator and no multiply-add per element (ZYFA's way). block: a fresh accumulator each,
which the total stage folds in (``total.emit_fold``)."""
from __future__ import annotations

from ..program import Reg
from .state import Kernel
from .target import span
from .total import emit_fold, emit_fold_row_sums


def emit_products(k: Kernel, v_parity: Reg) -> None:
    """Row sums and O^T = Vp^T P^T of the previous block, its V^T in buffers of ``v_parity``."""
    emit, L, ops, o = k.emit, k.lds, k.products, k.running.o
    emit("s_mul_i32", L.buf, v_parity, k.v.v_bytes)
    emit("v_add_u32", L.addr, L.buf, L.v_read)
    if k.v.pow2:
        emit("v_mfma_scale_f32_32x32x64_f8f6f4", span(o), span(ops.ones), span(ops.p), span(o), ops.one_scale,
             ops.p_scale)
    else:
        emit("v_mfma_f32_32x32x64_f8f6f4", span(o), span(ops.ones), span(ops.p), 0)
        emit_fold_row_sums(k)
    for d, tile in enumerate(k.running.total):
        emit("ds_read_b128_at", span(ops.v[:4]), L.addr, k.v.v_lds + 32 * 64 * d)
        emit("ds_read_b128_at", span(ops.v[4:]), L.addr, k.v.v_lds + 32 * 64 * d + 16)
        emit("s_waitcnt_lgkm")
        if k.v.pow2:
            emit("v_mfma_scale_f32_32x32x64_f8f6f4", span(tile), span(ops.v), span(ops.p), span(tile), ops.one_scale,
                 ops.p_scale)
            continue
        emit("v_mfma_f32_32x32x64_f8f6f4", span(o), span(ops.v), span(ops.p), 0)
        emit_fold(k, tile)
