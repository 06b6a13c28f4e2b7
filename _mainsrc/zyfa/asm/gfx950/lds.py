"""LDS for the attention kernel: the layout (two K buffers of 64 keys x D bytes, then two V^T
buffers of Dv rows x 64 bytes), where a lane reads its MFMA operands, and the staging code
that copies the next block from global memory into the buffers no wave reads before the
next barrier: group 0 stages K (a key a lane), group 1 V^T (a row a lane)."""
from __future__ import annotations

from ..program import Program, Reg
from .state import Args, Kernel, Lanes, Lds, QOperand
from .target import span
from .variant import Variant


def emit_layout(prog: Program, v: Variant, a: Args, ln: Lanes, q: QOperand) -> Lds:
    """Where this lane reads its MFMA operands and where it stages K or V^T."""
    emit = prog.emit
    prog.comment("LDS: two K buffers (64 keys x D bytes), then two V^T buffers (Dv rows x 64 bytes);")
    prog.comment("where this lane reads its MFMA operands, and where it stages K (a key a lane) or V^T")
    k_read, v_read, k_stage, vg_stage, v_stage, addr = prog.regs("v", 6)
    sk64, key_next, buf, kb, key0 = prog.regs("s", 5)
    emit("v_mad_u32_u24", k_read, ln.row, q.dim, ln.t16)         # (32 t + row) * D + 16 half (+ 32 t D)
    emit("v_lshlrev_b32", ln.t32, 5, ln.half)
    emit("v_lshl_add_u32", v_read, ln.row, 6, ln.t32)            # (32 d + row) * 64 + 32 half
    emit("v_mad_u32_u24", k_stage, ln.lane, q.dim, ln.w16)       # lane (a key) * D + 16 wave
    emit("v_mad_u32_u24", vg_stage, ln.lane, ln.skp, ln.w16)     # global: row * Sk_padded + 16 wave
    emit("v_lshl_add_u32", v_stage, ln.lane, 6, ln.w16)          # LDS: lane (a V^T row) * 64 + 16 wave
    emit("s_lshl_b32", sk64, ln.skp, 6)                          # 64 V^T rows further
    staged = prog.aligned("v", 4 * max(v.k_cols, v.v_rows), 4)
    exec_saved = prog.aligned("s", 2)
    return Lds(k_read, v_read, k_stage, vg_stage, v_stage, addr, sk64, key_next, buf, kb, key0, staged, exec_saved)


def _fresh(k: Kernel, label: str) -> str:
    """A label of its own: the staging code is emitted three times."""
    return f"{label}_{next(k.lds.serial)}"


def _v_rows_only(k: Kernel, body) -> None:
    """``body()`` with the lanes past V^T's Dv rows off (when Dv < 64 lanes)."""
    if k.v.value_dim < 64:
        k.emit("v_cmp_gt_u32", k.v.value_dim, k.lanes.lane)
        k.emit("s_and_saveexec_b64", span(k.lds.exec_saved), "vcc")
    body()
    if k.v.value_dim < 64:
        k.emit("s_mov_b64", "exec", span(k.lds.exec_saved))


def emit_stage_loads(k: Kernel, key_first: Reg) -> None:
    """Issue this wave's global loads of block ``key_first``: group 0 K, group 1 V^T."""
    emit, ln, L, staged = k.emit, k.lanes, k.lds, k.lds.staged
    load_v, loaded = _fresh(k, ".Lload_v"), _fresh(k, ".Lloaded")
    emit("s_cmp_lg_u32", ln.group, 0)
    emit("s_cbranch_scc1", load_v)
    emit("v_add_u32", L.addr, key_first, ln.lane)
    emit("v_min_u32", L.addr, ln.sk_last, L.addr)                # keys past seqlen_k load the last key
    emit("v_mad_u32_u24", L.addr, L.addr, k.args.k_stride, ln.w16)
    for c in range(k.v.k_cols):
        emit("global_load_dwordx4_at", span(staged[4 * c:4 * c + 4]), L.addr, k.args.pointer(1), 64 * c)
    emit("s_branch", loaded)
    k.prog.label(load_v)
    emit("v_add_u32", L.addr, key_first, L.vg_stage)

    def load_rows():
        for i in range(k.v.v_rows):
            emit("global_load_dwordx4_at", span(staged[4 * i:4 * i + 4]), L.addr, k.args.pointer(2), 0)
            if i + 1 < k.v.v_rows:
                emit("v_add_u32", L.addr, L.sk64, L.addr)
    _v_rows_only(k, load_rows)
    k.prog.label(loaded)


def emit_stage_writes(k: Kernel, block_parity: Reg) -> None:
    """Write the staged block into the buffers of parity ``block_parity`` (an SGPR, 0 or 1)."""
    emit, L, staged, v = k.emit, k.lds, k.lds.staged, k.v
    write_v, written = _fresh(k, ".Lwrite_v"), _fresh(k, ".Lwritten")
    emit("s_waitcnt_vm")
    emit("s_cmp_lg_u32", k.lanes.group, 0)
    emit("s_cbranch_scc1", write_v)
    emit("s_mul_i32", L.buf, block_parity, v.k_bytes)
    emit("v_add_u32", L.addr, L.buf, L.k_stage)
    for c in range(v.k_cols):
        emit("ds_write_b128_at", L.addr, span(staged[4 * c:4 * c + 4]), 64 * c)
    emit("s_branch", written)
    k.prog.label(write_v)
    emit("s_mul_i32", L.buf, block_parity, v.v_bytes)
    emit("v_add_u32", L.addr, L.buf, L.v_stage)
    _v_rows_only(k, lambda: [emit("ds_write_b128_at", L.addr, span(staged[4 * i:4 * i + 4]), v.v_lds + 64 * 64 * i)
                             for i in range(v.v_rows)])
    k.prog.label(written)
    emit("s_waitcnt_lgkm")
