"""Matrix-core instructions of the emulator, and the E4M3 format they take: the FP8 MFMA
32x32x64 (plain and with E8M0 block scales) and the FP8 -> float32 conversion."""
from __future__ import annotations

import numpy as np

from .core import F32, F64, REG, U32, U64, WAVE, as_f32, as_u32, literal, op, op_sel


# ---- matrix cores
def _e4m3_table() -> np.ndarray:
    b = np.arange(256)
    e, m = (b >> 3) & 15, (b & 7).astype(F64)
    mag = np.where(e == 0, m * 2.0 ** -9, (1 + m / 8) * 2.0 ** (e - 7.0))
    mag = np.where((b & 0x7F) == 0x7F, np.nan, mag)
    return np.where(b & 0x80, -mag, mag)


E4M3 = _e4m3_table()


def _mfma_32x32x64_e4m3(w, i, scale_a=None, scale_b=None):
    """D (32x32 f32) = A (32x64) B (64x32) + C, both inputs E4M3 (cbsz = blgp = 0).

    Byte j of lane l's 8 registers is A row l % 32 (B: column l % 32) at
    k = 32 (j // 16) + 16 (l // 32) + j % 16: two 16-byte halves, lanes 32-63 holding the
    upper 16 of each 32. That is how Triton's compiled gfx950 code arranges its operands
    (tests/gfx950/test_gfx950.py), which the issue takes as the judge over prose documentation.
    D/C register r of lane l is row 8 (r // 4) + 4 (l // 32) + r % 4, column l % 32.
    ``scale_a``/``scale_b`` (64 lanes of E8M0 exponents) multiply A's row l % 32 (B's column
    l % 32) over the 32 k of block l // 32 by 2^(e - 127).
    Products are exact and summed in float64, then rounded once to float32."""
    for mod in ("cbsz", "blgp", "abid"):
        if int(i.mods.get(mod, "0"), 0):
            raise NotImplementedError(f"MFMA {mod} (formats other than E4M3) in {i.line}")
    lanes = np.arange(WAVE)
    a_bytes = np.ascontiguousarray(w.block(i.args[1])).view(np.uint8)     # (64, 32)
    b_bytes = np.ascontiguousarray(w.block(i.args[2])).view(np.uint8)
    rows = lanes % 32
    A = np.zeros((32, 64))
    B = np.zeros((64, 32))
    for j in range(32):
        k = 32 * (j // 16) + 16 * (lanes // 32) + j % 16
        A[rows, k] = E4M3[a_bytes[:, j]]
        B[k, rows] = E4M3[b_bytes[:, j]]
    for scale, side in ((scale_a, "A"), (scale_b, "B")):
        if scale is None:
            continue
        if np.any(scale == 255):
            raise NotImplementedError(f"E8M0 NaN scale (255) in {i.line}")
        factor = np.exp2(scale.astype(F64) - 127).reshape(2, 32)          # [k block, row]
        if side == "A":
            A *= np.repeat(factor.T, 32, axis=1)
        else:
            B *= np.repeat(factor, 32, axis=0)
    reg = np.arange(16)
    out_rows = (8 * (reg // 4))[None, :] + (4 * (lanes // 32))[:, None] + (reg % 4)[None, :]   # (64, 16)
    out_cols = np.broadcast_to((lanes % 32)[:, None], (WAVE, 16))
    if REG.match(i.args[3]):
        C = w.block(i.args[3]).view(F32).astype(F64)[:, :16]
    else:
        C = np.full((WAVE, 16), as_f32(np.array([literal(i.args[3], 32, True)], U32))[0], F64)
    D = (A @ B)[out_rows, out_cols] + C
    w.set_block(i.args[0], D.astype(F32).view(U32), masked=False)


@op("v_mfma_f32_32x32x64_f8f6f4")
def _mfma_32x32x64_f8(w, i):
    _mfma_32x32x64_e4m3(w, i)



@op("v_mfma_scale_f32_32x32x64_f8f6f4")
def _mfma_scale_32x32x64_f8(w, i):
    """The MFMA with E8M0 block scales from VGPRs (operands 4 and 5); op_sel[s] picks the
    byte of scale register s (op_sel_hi[s] the upper two bytes), as Triton writes it."""
    if "op_sel_hi" not in i.mods:
        raise NotImplementedError(f"scaled MFMA without an explicit op_sel_hi (its default is all ones): {i.line}")
    lo, hi = op_sel(i, "op_sel"), op_sel(i, "op_sel_hi")
    scales = []
    for s, tok in enumerate(i.args[4:6]):
        byte = lo[s] + 2 * hi[s]
        scales.append(((w.vsrc(tok) >> U32(8 * byte)) & U32(0xFF)).astype(np.int64))
    _mfma_32x32x64_e4m3(w, i, *scales)



@op("v_cvt_scalef32_pk_f32_fp8")
def _v_cvt_scalef32_pk_f32_fp8(w, i):
    """Two E4M3 bytes of src0 (the low word, or the high with op_sel[0]) -> two float32, each
    times the float32 scale, into a register pair."""
    word = op_sel(i, "op_sel")[0]
    src, scale = w.vsrc(i.args[1]), as_f32(w.vsrc(i.args[2], True)).astype(F64)
    out = []
    for byte in (2 * word, 2 * word + 1):
        value = E4M3[(src >> U32(8 * byte)) & U32(0xFF)]
        out.append(as_u32((value * scale).astype(F32)).astype(U64))
    w.set_v(i.args[0], out[0] | (out[1] << U64(32)))
