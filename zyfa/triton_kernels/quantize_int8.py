"""The INT8 Q.K^T mode's fused quantizer in Triton (zyfa.quantize_int8_qk, bit for bit): q one
scale a token and head, k one a block of key_block keys and kv head, both int8 after smoothing
and rotation; v E4M3 a (batch, kv head), transposed. One launch for smooth_k's sums and v's
amax (quantize.channel_sums), one for the codes (``_int8_qkv``). The tile machinery (rotation
butterflies, E4M3 codes, the descale's quotient) is quantize.py's."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..device import interpreter_active
from ..launch_sizes import cdiv, next_power_of_2
from ..quantize_common import FP8Inputs
from ..spec.constants import AMAX_FLOOR, INT8_MAX, KEY_BLOCK, MAGIC, MAGIC_BITS
from .quantize import (BLOCK_S, butterflies, channel_mean, channel_sums, dummy_pointer, quantize_tile, quotient,
                       rotation_parts, tile_rows)

_MAG: tl.constexpr = tl.constexpr(MAGIC)
_MAG_BITS: tl.constexpr = tl.constexpr(MAGIC_BITS)
_AMAX_FLOOR: tl.constexpr = tl.constexpr(AMAX_FLOOR)
_INT8: tl.constexpr = tl.constexpr(INT8_MAX)
_NEG_RCP_INT8: tl.constexpr = tl.constexpr(-(torch.tensor(1.0) / INT8_MAX).item())    # -RN(1 / 127) in float32


@triton.jit
def _descale(amax, FMA_DIV: tl.constexpr):
    """RN(max(amax, floor) / 127), zyfa.quantize's descale_of(amax, 127). FMA_DIV: Markstein's
    quotient against the constant -RN(1 / 127) (quotient's steps without its reciprocal): three
    float operations where the IEEE division takes a dozen; equal to the division for every
    amax at or above the floor (checked over all float32 significands; powers of two scale it
    exactly there). Off under Triton's interpreter, whose fma rounds the product first."""
    a = tl.maximum(amax, _AMAX_FLOOR)
    if FMA_DIV:
        q = a * _NEG_RCP_INT8
        return tl.fma(tl.fma(q, _INT8, a), _NEG_RCP_INT8, q) * -1.0
    else:
        return tl.math.div_rn(a, _INT8)


@triton.jit
def _largest(x, axis: tl.constexpr):
    """The largest of non-negative floats along ``axis``, as the largest of their bits (the
    same order): a warp's integer max reduction where the float one takes shuffles."""
    return tl.max(x.to(tl.int32, bitcast=True), axis=axis).to(tl.float32, bitcast=True)


@triton.jit
def _smoothed_rotated(ptrs, m, mean, signs, hscale, SMOOTH: tl.constexpr, HAD: tl.constexpr, HBLOCK: tl.constexpr,
                      HSTAGES: tl.constexpr, BS: tl.constexpr, BD: tl.constexpr):
    """A tile loaded as float32 (zeros where masked), minus the channel means, rotated."""
    x = tl.load(ptrs, mask=m, other=0.0).to(tl.float32)
    if SMOOTH:
        x = x - mean[None, :]
    if HAD:
        x = butterflies(x * signs[None, :], HBLOCK, BS, BD, HSTAGES, True) * hscale
    return x


@triton.jit
def _int8_rows(x_ptr, out_ptr, ds_ptr, mean, signs, hscale, b, h, lo, hi, S, D, sb, ss, sh, sd, H, ds_at,
               SMOOTH: tl.constexpr, HAD: tl.constexpr, HBLOCK: tl.constexpr, HSTAGES: tl.constexpr,
               PER_ROW: tl.constexpr, ONE_DS: tl.constexpr, NSUB: tl.constexpr, BS: tl.constexpr,
               BD: tl.constexpr, FMA_DIV: tl.constexpr):
    """Rows lo..hi of head h of batch b: int8 codes, and per row the descale (NaN where the
    row has a non-finite value, whose code is 0). The scale is each row's (PER_ROW) or one for
    all the rows, found in a first sweep over them (NSUB tiles of BS rows); ONE_DS: that one
    descale written once, at ds_ptr + ds_at, NaN if any row has a non-finite value."""
    d = tl.arange(0, BD)
    dmask = d < D
    amax = 0.0
    nbad = 0
    if not PER_ROW:
        for i in range(NSUB):
            s = lo + i * BS + tl.arange(0, BS)
            m = (s[:, None] < hi) & dmask[None, :]
            x = _smoothed_rotated(x_ptr + b * sb + s[:, None] * ss + h * sh + d[None, :] * sd, m, mean, signs, hscale,
                                  SMOOTH, HAD, HBLOCK, HSTAGES, BS, BD)
            fin = tl.abs(x) < float("inf")
            if ONE_DS:
                nbad = tl.maximum(nbad, tl.max(tl.max(tl.where(fin, 0, m.to(tl.int32)), axis=1), axis=0))
            amax = tl.maximum(amax, _largest(_largest(tl.where(fin & m, tl.abs(x), 0.0), 1), 0))
        one = _descale(amax, FMA_DIV)
    for i in range(NSUB):
        s = lo + i * BS + tl.arange(0, BS)
        m = (s[:, None] < hi) & dmask[None, :]
        x = _smoothed_rotated(x_ptr + b * sb + s[:, None] * ss + h * sh + d[None, :] * sd, m, mean, signs, hscale,
                              SMOOTH, HAD, HBLOCK, HSTAGES, BS, BD)
        fin = tl.abs(x) < float("inf")
        x = tl.where(fin, x, 0.0)                       # a non-finite value's code is 0 (RN(0 / d) = 0)
        if not ONE_DS:
            bad = tl.max(tl.where(fin, 0, m.to(tl.int32)), axis=1)
        if PER_ROW:
            # unsmoothed, the masked lanes hold rotated zeros; smoothed, minus the means
            descale = _descale(_largest(tl.where(m, tl.abs(x), 0.0) if SMOOTH else tl.abs(x), 1), FMA_DIV)
        else:
            descale = tl.zeros((BS,), tl.float32) + one
        # |x| <= the amax the descale came from, so |y| <= 127.00001 (all float32 amax): no clamp
        y = quotient(x, descale[:, None], FMA_DIV)
        code = (y + _MAG).to(tl.int32, bitcast=True) - _MAG_BITS             # round half to even
        tl.store(out_ptr + ((b * S + s[:, None]) * H + h) * D + d[None, :], code.to(tl.int8), mask=m)
        if not ONE_DS:
            tl.store(ds_ptr + (b * H + h) * S + s, tl.where(bad == 0, descale, float("nan")), mask=s < hi)
    if ONE_DS:
        tl.store(ds_ptr + ds_at, tl.where(nbad == 0, one, float("nan")))


@triton.jit
def _int8_qkv(q_ptr, k_ptr, v_ptr, q_out, k_out, v_out, qd_ptr, kd_ptr, sums_ptr, signs_ptr, scale_ptr,
              v_amax, vd_ptr, dummy, Sq, Sk, S_OUT_V, D, Dv, qsb, qss, qsh, qsd, ksb, kss, ksh, ksd,
              vsb, vss, vsh, vsd, HKV, NTQ, NTK, NTV, KEY_BLOCK,
              GROUP: tl.constexpr, SMOOTH: tl.constexpr, HAD: tl.constexpr, HBLOCK: tl.constexpr,
              HSTAGES: tl.constexpr, NSUB_K: tl.constexpr, K_BLOCK_DS: tl.constexpr, BS: tl.constexpr,
              BD: tl.constexpr, BS_V: tl.constexpr, BD_V: tl.constexpr, FMA_DIV: tl.constexpr):
    """Grid (batch * kv heads, the most tiles of the three, 3): axis 2 = 0 a tile of BS queries
    of the group's heads, 1 a block of KEY_BLOCK keys (NSUB_K tiles of BS; smooth_k's mean
    from _sums_pass's sums), 2 a tile of BS_V tokens of V^T's codes (v's amax from
    _sums_pass). K_BLOCK_DS: k's descales one a block (B, Hkv, NTK), else one a key
    (B, Hkv, Sk)."""
    pid = tl.program_id(0).to(tl.int64)
    tile = tl.program_id(1)
    which = tl.program_id(2)
    b = pid // HKV
    hk = pid % HKV
    d = tl.arange(0, BD)
    signs = d * 0.0
    hscale = 1.0
    if HAD:
        signs = tl.load(signs_ptr + d)
        hscale = tl.load(scale_ptr)
    if which == 0:
        if tile < NTQ:
            for g in range(GROUP):
                _int8_rows(q_ptr, q_out, qd_ptr, d * 0.0, signs, hscale, b, hk * GROUP + g, tile * BS,
                           tl.minimum(tile * BS + BS, Sq), Sq, D, qsb, qss, qsh, qsd, HKV * GROUP, 0,
                           False, HAD, HBLOCK, HSTAGES, True, False, 1, BS, BD, FMA_DIV)
    elif which == 1:
        if tile < NTK:
            mean = d * 0.0
            if SMOOTH:
                mean = channel_mean(sums_ptr, pid, d, BD)
            _int8_rows(k_ptr, k_out, kd_ptr, mean, signs, hscale, b, hk, tile * KEY_BLOCK,
                       tl.minimum(tile * KEY_BLOCK + KEY_BLOCK, Sk), Sk, D, ksb, kss, ksh, ksd, HKV, pid * NTK + tile,
                       SMOOTH, HAD, HBLOCK, HSTAGES, False, K_BLOCK_DS, NSUB_K, BS, BD, FMA_DIV)
    else:
        if tile < NTV:
            quantize_tile(v_ptr, v_out, dummy, dummy, dummy, v_amax, vd_ptr, pid, tile, Sk, S_OUT_V, Dv,
                  vsb, vss, vsh, vsd, HKV, 2, 1, False, False, 1, 0, True, False, BS_V, BD_V, FMA_DIV)


def quantize_int8_qk_fused(q, k, v, smooth_k: bool = True, hadamard: bool = True, seed: int = 0,
                           key_block: int = 128) -> FP8Inputs:
    """zyfa.quantize_int8_qk in Triton kernels, bit for bit: one launch for smooth_k's sums and
    v's amax (_sums_pass), one for q and k's codes and V^T's (_int8_qkv)."""
    B, Sq, Hq, D = q.shape
    Sk, Hkv, Dv = k.shape[1], k.shape[2], v.shape[-1]
    dev = q.device
    dummy = dummy_pointer(dev)
    signs, scale, block = rotation_parts(D, seed, dev) if hadamard else (dummy, dummy, 1)
    sums, v_amax = channel_sums(k, v, smooth=smooth_k)
    q8 = torch.empty(B, Sq, Hq, D, dtype=torch.int8, device=dev)
    k8 = torch.empty(B, Sk, Hkv, D, dtype=torch.int8, device=dev)
    qd = torch.empty(B, Hq, Sq, dtype=torch.float32, device=dev)
    bd, bd_v = next_power_of_2(D), next_power_of_2(Dv)
    rows = tile_rows(bd)
    s_out = Sk + (-Sk) % 16
    ntq, ntk, ntv = cdiv(Sq, rows), cdiv(Sk, key_block), cdiv(s_out, BLOCK_S)
    block_ds = key_block == KEY_BLOCK          # the generated kernel's form, written by the kernel
    kd = torch.empty(B, Hkv, ntk if block_ds else Sk, dtype=torch.float32, device=dev)
    vd = torch.empty(B * Hkv, dtype=torch.float32, device=dev)
    vt = torch.empty(B, Hkv, Dv, s_out, dtype=torch.uint8, device=dev)
    _int8_qkv[(B * Hkv, max(ntq, ntk, ntv), 3)](
        q, k, v, q8, k8, vt, qd, kd, sums, signs, scale, v_amax, vd, dummy, Sq, Sk, s_out, D, Dv,
        *q.stride(), *k.stride(), *v.stride(), Hkv, ntq, ntk, ntv, key_block,
        GROUP=Hq // Hkv, SMOOTH=smooth_k, HAD=hadamard, HBLOCK=block, HSTAGES=block.bit_length() - 1,
        NSUB_K=cdiv(key_block, rows), K_BLOCK_DS=block_ds, BS=rows, BD=bd, BS_V=BLOCK_S, BD_V=bd_v,
        FMA_DIV=not interpreter_active())
    v8 = vt.view(torch.float8_e4m3fn)[..., :Sk].permute(0, 3, 1, 2)
    return FP8Inputs(q8, k8, v8, qd, kd, vd.reshape(B, Hkv))
