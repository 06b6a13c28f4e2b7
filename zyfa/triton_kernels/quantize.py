"""Fused FP8 (E4M3) quantization of q, k, v in Triton: the same bits as zyfa.quantize_fp8
(the PyTorch path, which stays the spec and the CPU path) for granularity "head" and "tensor",
with and without smooth_k and hadamard.

Passes over memory, per tensor (one launch each):
  q, v            2: the finite amax per (batch, kv head) of the (rotated) values, gathered
                  with an atomic max on its float bits (the amax is >= 0, so the int32 order is
                  the float order), then rotate, scale, round to E4M3 and write (v transposed,
                  as quantize_fp8 writes it), each program computing the descale from the amax
                  with quantize_fp8's arithmetic (IEEE division, so the same bits);
  k, smooth_k     3: the per-channel mean over tokens must be known before the amax of
                  k - mean (rotated) can be taken, and the amax before anything is written.
                  (Without hadamard, per-channel max and min taken with the sums would give
                  that amax in the same pass, rounding being monotonic; not done yet.)
No torch op runs between the passes but for smooth_k's mean (float64 sums, whose order does
not matter when they are exact): a call is a few launches, not dozens of small ops.

E4M3 codes are built with integer arithmetic (Triton's interpreter does not round float->fp8
casts like the GPU): round-half-even, saturating at 448, non-finite -> 0x7F as quantize_fp8.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..quantize import _TINY, FP8Inputs, check_inputs, hadamard_matrix, hadamard_parts
from ..spec.constants import E4M3_MAX, MAGIC, MAGIC_BITS

_MODE_SUM: tl.constexpr = tl.constexpr(0)       # per-channel float64 sums and counts of finite k
_MODE_AMAX: tl.constexpr = tl.constexpr(1)      # finite amax of the transformed values
_MODE_QUANT: tl.constexpr = tl.constexpr(2)     # E4M3 codes written
_MAG: tl.constexpr = tl.constexpr(MAGIC)
_MAG_BITS: tl.constexpr = tl.constexpr(MAGIC_BITS)
_SAT: tl.constexpr = tl.constexpr(E4M3_MAX)
_TINY_AMAX: tl.constexpr = tl.constexpr(_TINY)
BLOCK_S = 32


@triton.jit
def _butterflies(y, BLOCK: tl.constexpr, BS: tl.constexpr, BD: tl.constexpr, NSTAGE: tl.constexpr):
    """Sylvester butterflies (a + b, a - b) within blocks of BLOCK = 2^NSTAGE channels,
    widest stride first: zyfa.quantize.rotate's order."""
    for i in tl.static_range(NSTAGE):       # stride BLOCK >> (i + 1)
        t = tl.permute(tl.reshape(y, (BS, BD // (BLOCK >> i), 2, BLOCK >> (i + 1))), (0, 1, 3, 2))
        a, b = tl.split(t)
        y = tl.reshape(tl.permute(tl.join(a + b, a - b), (0, 1, 3, 2)), (BS, BD))
    return y


@triton.jit
def e4m3_code(x):
    """int32 E4M3fn codes of float32 x: round-half-even, saturating at 448, NaN/Inf -> 0x7F."""
    c = tl.minimum(tl.maximum(x, -_SAT), _SAT)
    u = c.to(tl.int32, bitcast=True)
    sign = (u >> 24) & 0x80
    a = u & 0x7FFFFFFF
    normal = ((a + 0x7FFFF + ((a >> 20) & 1)) >> 20) - 960          # 3 mantissa bits, rebias 127 -> 7
    mag = a.to(tl.float32, bitcast=True)
    sub = (mag * 512.0 + _MAG).to(tl.int32, bitcast=True) - _MAG_BITS   # round-half-even(|x| * 2^9)
    code = sign | tl.where(a < 0x3C800000, sub, normal)               # below 2^-6: subnormal
    return tl.where(tl.abs(x) < float("inf"), code, 0x7F)          # NaN < inf is false


@triton.jit
def _quant_pass(x_ptr, out_ptr, mean_ptr, signs_ptr, scale_ptr, amax_ptr, descale_ptr, part_ptr, cnt_ptr,
                S, S_OUT, D, sb, ss, sh, sd, HKV, NT,
                MODE: tl.constexpr, GROUP: tl.constexpr, SMOOTH: tl.constexpr, HAD: tl.constexpr,
                HBLOCK: tl.constexpr, HSTAGES: tl.constexpr, TRANS: tl.constexpr, PER_TENSOR: tl.constexpr,
                BS: tl.constexpr, BD: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)     # batch * HKV + kv head (64-bit offsets)
    tile = tl.program_id(1)
    slot = pid * 0 if PER_TENSOR else pid   # where the amax and the descale live
    b = pid // HKV
    hk = pid % HKV
    s = tile * BS + tl.arange(0, BS)
    d = tl.arange(0, BD)
    dmask = d < D
    m = (s[:, None] < S) & dmask[None, :]
    if SMOOTH:
        mean = tl.load(mean_ptr + pid * BD + d)                     # zero past D
    if HAD:
        signs = tl.load(signs_ptr + d)                              # zero past D
        hscale = tl.load(scale_ptr)
    if MODE == _MODE_QUANT:                 # quantize_fp8's descale_of: max(amax, 1e-12) / 448
        amax_bits = tl.load(amax_ptr + slot)
        descale = tl.math.div_rn(tl.maximum(amax_bits.to(tl.float32, bitcast=True), _TINY_AMAX), _SAT)
        if (tile == 0) & (slot == pid):     # one program a slot writes it
            tl.store(descale_ptr + slot, descale)
    amax = tl.zeros((BS,), tl.float32)
    for g in range(GROUP):
        h = hk * GROUP + g
        x = tl.load(x_ptr + b * sb + s[:, None] * ss + h * sh + d[None, :] * sd, mask=m, other=0.0)
        x = x.to(tl.float32)
        if MODE == _MODE_SUM:
            fin = m & (tl.abs(x) < float("inf"))
            xs = tl.where(fin, x.to(tl.float64), 0.0)
            tl.store(part_ptr + (pid * NT + tile) * BD + d, tl.sum(xs, axis=0))
            tl.store(cnt_ptr + (pid * NT + tile) * BD + d, tl.sum(fin.to(tl.int32), axis=0))
        else:
            if SMOOTH:
                x = x - mean[None, :]
            if HAD:
                x = _butterflies(x * signs[None, :], HBLOCK, BS, BD, HSTAGES) * hscale
            if MODE == _MODE_AMAX:
                fin = m & (tl.abs(x) < float("inf"))
                amax = tl.maximum(amax, tl.max(tl.where(fin, tl.abs(x), 0.0), axis=1))
            else:
                code = e4m3_code(tl.math.div_rn(x, descale)).to(tl.uint8)
                if TRANS:                   # (B, HKV, D, S_OUT) bytes; the pad past S as zeros
                    code = tl.where(s[:, None] < S, code, 0)
                    off = (pid * D + d[None, :]) * S_OUT + s[:, None]
                    tl.store(out_ptr + off, code, mask=(s[:, None] < S_OUT) & dmask[None, :])
                else:                       # (B, S, H, D) contiguous
                    off = ((b * S + s[:, None]) * (HKV * GROUP) + h) * D + d[None, :]
                    tl.store(out_ptr + off, code, mask=m)
    if MODE == _MODE_AMAX:
        tl.atomic_max(amax_ptr + slot, tl.max(amax, axis=0).to(tl.int32, bitcast=True))


def _launch(x, mode, group, dummy, smooth=None, had=None, amax=None, descale=None, out=None, trans=False):
    B, S, H, D = x.shape
    hkv = H // group
    bd = triton.next_power_of_2(D)
    s_out = out.shape[-1] if trans else S
    nt = triton.cdiv(s_out, BLOCK_S)
    part = cnt = dummy
    if mode == 0:
        part = torch.empty(B * hkv, nt, bd, dtype=torch.float64, device=x.device)
        cnt = torch.empty(B * hkv, nt, bd, dtype=torch.int32, device=x.device)
    signs, hscale, hblock = had if had is not None else (dummy, dummy, 1)
    _quant_pass[(B * hkv, nt)](
        x, out if out is not None else dummy, smooth if smooth is not None else dummy, signs, hscale,
        amax if amax is not None else dummy, descale if descale is not None else dummy, part, cnt,
        S, s_out, D, *x.stride(), hkv, nt,
        MODE=mode, GROUP=group, SMOOTH=smooth is not None, HAD=had is not None, HBLOCK=hblock,
        HSTAGES=hblock.bit_length() - 1, TRANS=trans, PER_TENSOR=amax is not None and amax.numel() == 1,
        BS=BLOCK_S, BD=bd)
    return (part, cnt) if mode == 0 else None


def _rotation(n, seed, device):
    signs, block, scale = hadamard_parts(n, seed)
    padded = torch.zeros(triton.next_power_of_2(n), dtype=torch.float32, device=device)
    padded[:n] = signs.float()
    return padded, torch.tensor([scale], dtype=torch.float32, device=device), block


def _one(x, group, granularity, dummy, had=None, smooth=None, trans=False):
    """amax pass, then the quantize pass (which computes the descales): (uint8 codes, descale)."""
    B, S, H, D = x.shape
    slots = 1 if granularity == "tensor" else B * (H // group)
    amax = torch.zeros(slots, dtype=torch.int32, device=x.device)          # float bits of 0.0
    descale = torch.empty(slots, dtype=torch.float32, device=x.device)
    _launch(x, 1, group, dummy, smooth=smooth, had=had, amax=amax)
    if trans:
        out = torch.empty(B, H, D, S + (-S) % 16, dtype=torch.uint8, device=x.device)
    else:
        out = torch.empty(B, S, H, D, dtype=torch.uint8, device=x.device)
    _launch(x, 2, group, dummy, smooth=smooth, had=had, amax=amax, descale=descale, out=out, trans=trans)
    return out, descale.reshape(()) if granularity == "tensor" else descale.reshape(B, H // group)


def quantize_fp8_fused(q, k, v, granularity: str = "head", smooth_k: bool = False, hadamard: bool = False,
                       seed: int = 0) -> FP8Inputs:
    """quantize_fp8 in Triton kernels, bit for bit (granularity "head" or "tensor")."""
    _, _, Hq, D, Hkv, Dv = check_inputs(q, k, v, granularity, 64, seed)
    if granularity not in ("head", "tensor"):
        raise ValueError(f"the fused quantizer supports granularity 'head' and 'tensor', not {granularity!r}; "
                         "use fused=False")
    dummy = torch.zeros(1, dtype=torch.float32, device=q.device)
    had_qk = _rotation(D, seed, q.device) if hadamard else None
    had_v = _rotation(Dv, seed + 1, q.device) if hadamard else None
    mean = None
    if smooth_k:
        part, cnt = _launch(k, 0, 1, dummy)                                # (B*Hkv, nt, BD)
        mean = (part.sum(dim=1) / cnt.sum(dim=1).clamp(min=1)).float().contiguous()
    q8, qd = _one(q, Hq // Hkv, granularity, dummy, had=had_qk)
    k8, kd = _one(k, 1, granularity, dummy, had=had_qk, smooth=mean)
    vt, vd = _one(v, 1, granularity, dummy, had=had_v, trans=True)
    f8 = torch.float8_e4m3fn
    v8 = vt.view(f8)[..., :k.shape[1]].permute(0, 3, 1, 2)
    v_rot = hadamard_matrix(Dv, seed + 1, q.device).float() if hadamard else None
    return FP8Inputs(q8.view(f8), k8.view(f8), v8, qd, kd, vd, v_rot)
