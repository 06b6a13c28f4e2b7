"""Fused FP8 (E4M3) quantization of q, k, v in Triton: the same bits as zyfa.quantize_fp8
(the PyTorch path, which stays the spec and the CPU path) for granularity "head" and "tensor",
with and without smooth_k and hadamard; the tile machinery quantize_int8.py (the INT8 Q.K^T
mode's quantizer) shares.

Passes over memory, per tensor (each pass one launch for q, k and v together, ``_quant_qkv``):
  q, v            2: the finite amax per (batch, kv head) of the (rotated) values, gathered
                  with an atomic max on its float bits (the amax is >= 0, so the int32 order is
                  the float order), then rotate, scale, round to E4M3 and write (v transposed,
                  as quantize_fp8 writes it), each program computing the descale from the amax
                  with quantize_fp8's arithmetic (the same bits);
  k, smooth_k     3: the per-channel mean over tokens must be known before the amax of
                  k - mean (rotated) can be taken, and the amax before anything is written
                  (the sums: ``_sums_pass``, float64 atomics, whose order does not matter
                  when the sums are exact; each program divides them itself).
                  (Without hadamard, per-channel max and min taken with the sums would give
                  that amax in the same pass, rounding being monotonic; not done yet.)
No torch op runs between the launches: a call is two launches (three with smooth_k) and a
few allocations.

E4M3 codes are built with integer arithmetic (Triton's interpreter does not round float->fp8
casts like the GPU): round-half-even, saturating at 448, non-finite -> 0x7F as quantize_fp8.
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ..device import interpreter_active
from ..launch_sizes import cdiv, next_power_of_2
from ..quantize_common import FP8Inputs, check_inputs, hadamard_matrix, hadamard_parts
from ..spec.constants import AMAX_FLOOR, E4M3_MAX, MAGIC, MAGIC_BITS

_MODE_AMAX: tl.constexpr = tl.constexpr(1)      # finite amax of the transformed values
_MODE_QUANT: tl.constexpr = tl.constexpr(2)     # E4M3 codes written
_MAG: tl.constexpr = tl.constexpr(MAGIC)
_MAG_BITS: tl.constexpr = tl.constexpr(MAGIC_BITS)
_SAT: tl.constexpr = tl.constexpr(E4M3_MAX)
_AMAX_FLOOR: tl.constexpr = tl.constexpr(AMAX_FLOOR)
BLOCK_S = 32


def tile_rows(block_d: int) -> int:
    """Rows of a 2048-element tile (16 values a thread of 4 warps), for the passes that keep
    several copies of a tile live, so that their registers a thread stay low: the INT8 launch's
    q and k (rotation, row amax, codes) and the FP8 passes that rotate (the plain passes keep
    BLOCK_S rows, slower with fewer: docs/decisions.md)."""
    return max(1, 2048 // block_d)


def sum_rows(block_d: int) -> int:
    """Rows of smooth_k's sums tiles: half of tile_rows, since each element is held twice more
    (a float64 sum and an int32 count); at 2048 elements a program's registers allowed four
    programs an SM, at 1024 six, and the launch ran faster (docs/decisions.md)."""
    return max(1, tile_rows(block_d) // 2)


@triton.jit
def butterflies(y, BLOCK: tl.constexpr, BS: tl.constexpr, BD: tl.constexpr, NSTAGE: tl.constexpr,
                IN_RUNS: tl.constexpr):
    """Sylvester butterflies (a + b, a - b) within blocks of BLOCK = 2^NSTAGE channels,
    widest stride first: zyfa.quantize.rotate's order. A gathered stage takes every column's
    partner p (warp shuffles, where reshapes and permutes went through shared memory) and
    forms p + sign * y, sign +1 in the lower column of a pair (a + b) and -1 in the upper
    (a - b): one FMA whose product is exact, so the same rounding as the addition. The
    smallest strides, whose pairs lie in one thread's registers, go by reshapes (_pair_stage,
    no shuffle): strides 2 and 1 of the (BS, BD) tile, or with IN_RUNS the tile taken as
    (BS, BD / RUN, RUN), runs of RUN = min(16, BLOCK) columns, every stride below RUN, the
    larger ones gathering whole runs. Either way every pair sums as in the spec; only which
    thread holds a column differs. IN_RUNS took the INT8 codes launch's instructions down and
    made the FP8 passes slower (docs/decisions.md)."""
    if IN_RUNS:
        NR: tl.constexpr = NSTAGE - 4 if NSTAGE > 4 else 0      # stages that pair whole runs of 16
        RUN: tl.constexpr = BLOCK >> NR
        G: tl.constexpr = BD // RUN
        y3 = tl.reshape(y, (BS, G, RUN))
        g = tl.arange(0, G)
        for i in tl.static_range(NR):
            runs = (BLOCK >> (i + 1)) // RUN
            p = tl.gather(y3, tl.broadcast_to((g ^ runs)[None, :, None], (BS, G, RUN)), axis=1)
            y3 = p + tl.where((g & runs) == 0, 1.0, -1.0)[None, :, None] * y3
        for i in tl.static_range(NSTAGE - NR):
            y3 = _pair_stage_in_runs(y3, RUN >> (i + 1), BS, G, RUN)
        y = tl.reshape(y3, (BS, BD))
    else:
        d = tl.arange(0, BD)
        NG: tl.constexpr = NSTAGE - 2 if NSTAGE > 2 else 0
        for i in tl.static_range(NG):
            stride = BLOCK >> (i + 1)
            p = tl.gather(y, tl.broadcast_to((d ^ stride)[None, :], (BS, BD)), axis=1)
            y = p + tl.where((d & stride) == 0, 1.0, -1.0)[None, :] * y
        for i in tl.static_range(NSTAGE - NG):
            y = _pair_stage(y, BLOCK >> (NG + i + 1), BS, BD)
    return y


@triton.jit
def _pair_stage(y, STRIDE: tl.constexpr, BS: tl.constexpr, BD: tl.constexpr):
    """One butterfly stage of stride STRIDE by reshape, split and join."""
    t = tl.permute(tl.reshape(y, (BS, BD // (2 * STRIDE), 2, STRIDE)), (0, 1, 3, 2))
    a, b = tl.split(t)
    return tl.reshape(tl.permute(tl.join(a + b, a - b), (0, 1, 3, 2)), (BS, BD))


@triton.jit
def _pair_stage_in_runs(y, STRIDE: tl.constexpr, BS: tl.constexpr, G: tl.constexpr, RUN: tl.constexpr):
    """_pair_stage within each run of a (BS, G, RUN) tile."""
    t = tl.permute(tl.reshape(y, (BS, G, RUN // (2 * STRIDE), 2, STRIDE)), (0, 1, 2, 4, 3))
    a, b = tl.split(t)
    return tl.reshape(tl.permute(tl.join(a + b, a - b), (0, 1, 2, 4, 3)), (BS, G, RUN))


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
def quotient(x, d, FMA_DIV: tl.constexpr):
    """x / d correctly rounded (d > 0 and finite: one value, or a row's broadcast over its row).
    FMA_DIV: from n = -RN(1 / d), once a row, q' = RN(x n), e = RN(x + q' d) = RN(x - q d), and
    -RN(q' + e n) = RN(q + e / d's reciprocal): Markstein's correctly rounded quotient wherever
    x / d is a normal float (below it every INT8 and E4M3 code is a zero of x's sign either
    way), where an IEEE division an element costs a MUFU.RCP, FMAs and a range check. Signs
    flip by multiplying by -1, exact for zeros too (Triton's unary minus is 0 - x, which
    makes -0 of +0 wrong), so x = -0 gives -0 as the division does. Off under Triton's
    interpreter, whose fma rounds the product first: there the IEEE division itself."""
    if FMA_DIV:
        n = tl.math.div_rn(tl.full(d.shape, 1.0, tl.float32), d) * -1.0
        q = x * n
        return tl.fma(tl.fma(q, d, x), n, q) * -1.0
    else:
        return tl.math.div_rn(x, d)


@triton.jit
def quantize_tile(x_ptr, out_ptr, sums_ptr, signs_ptr, scale_ptr, amax_ptr, descale_ptr,
          pid, tile, S, S_OUT, D, sb, ss, sh, sd, HKV,
          MODE: tl.constexpr, GROUP: tl.constexpr, SMOOTH: tl.constexpr, HAD: tl.constexpr,
          HBLOCK: tl.constexpr, HSTAGES: tl.constexpr, TRANS: tl.constexpr, PER_TENSOR: tl.constexpr,
          BS: tl.constexpr, BD: tl.constexpr, FMA_DIV: tl.constexpr):
    """One pass over tile ``tile`` (BS tokens) of (batch, kv head) ``pid`` of one tensor."""
    slot = pid * 0 if PER_TENSOR else pid   # where the amax and the descale live
    b = pid // HKV
    hk = pid % HKV
    s = tile * BS + tl.arange(0, BS)
    d = tl.arange(0, BD)
    dmask = d < D
    m = (s[:, None] < S) & dmask[None, :]
    if SMOOTH:
        mean = channel_mean(sums_ptr, pid, d, BD)                  # zero past D
    if HAD:
        signs = tl.load(signs_ptr + d)                              # zero past D
        hscale = tl.load(scale_ptr)
    if MODE == _MODE_QUANT:                 # quantize_fp8's descale_of: max(amax, 1e-12) / 448
        amax_bits = tl.load(amax_ptr + slot)
        descale = tl.math.div_rn(tl.maximum(amax_bits.to(tl.float32, bitcast=True), _AMAX_FLOOR), _SAT)
        if (tile == 0) & (slot == pid):     # one program a slot writes it
            tl.store(descale_ptr + slot, descale)
    amax = tl.zeros((BS,), tl.float32)
    for g in range(GROUP):
        h = hk * GROUP + g
        x = tl.load(x_ptr + b * sb + s[:, None] * ss + h * sh + d[None, :] * sd, mask=m, other=0.0)
        x = x.to(tl.float32)
        if SMOOTH:
            x = x - mean[None, :]
        if HAD:
            x = butterflies(x * signs[None, :], HBLOCK, BS, BD, HSTAGES, False) * hscale
        if MODE == _MODE_AMAX:
            fin = m & (tl.abs(x) < float("inf"))
            amax = tl.maximum(amax, tl.max(tl.where(fin, tl.abs(x), 0.0), axis=1))
        else:
            code = e4m3_code(quotient(x, descale, FMA_DIV)).to(tl.uint8)
            if TRANS:                       # (B, HKV, D, S_OUT) bytes; the pad past S as zeros
                code = tl.where(s[:, None] < S, code, 0)
                off = (pid * D + d[None, :]) * S_OUT + s[:, None]
                tl.store(out_ptr + off, code, mask=(s[:, None] < S_OUT) & dmask[None, :])
            else:                           # (B, S, H, D) contiguous
                off = ((b * S + s[:, None]) * (HKV * GROUP) + h) * D + d[None, :]
                tl.store(out_ptr + off, code, mask=m)
    if MODE == _MODE_AMAX:
        tl.atomic_max(amax_ptr + slot, tl.max(amax, axis=0).to(tl.int32, bitcast=True))


@triton.jit
def _quant_qkv(q_ptr, k_ptr, v_ptr, q_out, k_out, v_out, sums_ptr, signs_qk, scale_qk, signs_v, scale_v,
               amax_ptr, descale_ptr, dummy, Sq, Sk, S_OUT_V, Dqk, Dv,
               qsb, qss, qsh, qsd, ksb, kss, ksh, ksd, vsb, vss, vsh, vsd, HKV, NTQ, NTK, NTV, SLOTS,
               MODE: tl.constexpr, GROUP: tl.constexpr, SMOOTH: tl.constexpr, HAD: tl.constexpr,
               HBLOCK_QK: tl.constexpr, HSTAGES_QK: tl.constexpr, HBLOCK_V: tl.constexpr, HSTAGES_V: tl.constexpr,
               PER_TENSOR: tl.constexpr, BS: tl.constexpr, BD_QK: tl.constexpr, BD_V: tl.constexpr,
               FMA_DIV: tl.constexpr):
    """The amax pass or the quantize pass of q, k and v in one launch: grid (batch * kv heads,
    the most tiles of the three, 3); axis 2 picks the tensor, whose amax and descale slots
    are the buffers' thirds."""
    pid = tl.program_id(0).to(tl.int64)
    tile = tl.program_id(1)
    which = tl.program_id(2)
    if which == 0:
        if tile < NTQ:
            quantize_tile(q_ptr, q_out, dummy, signs_qk, scale_qk, amax_ptr, descale_ptr,
                  pid, tile, Sq, Sq, Dqk, qsb, qss, qsh, qsd, HKV,
                  MODE, GROUP, False, HAD, HBLOCK_QK, HSTAGES_QK, False, PER_TENSOR, BS, BD_QK, FMA_DIV)
    elif which == 1:
        if tile < NTK:
            quantize_tile(k_ptr, k_out, sums_ptr, signs_qk, scale_qk, amax_ptr + SLOTS, descale_ptr + SLOTS,
                  pid, tile, Sk, Sk, Dqk, ksb, kss, ksh, ksd, HKV,
                  MODE, 1, SMOOTH, HAD, HBLOCK_QK, HSTAGES_QK, False, PER_TENSOR, BS, BD_QK, FMA_DIV)
    else:
        if tile < NTV:
            quantize_tile(v_ptr, v_out, dummy, signs_v, scale_v, amax_ptr + 2 * SLOTS, descale_ptr + 2 * SLOTS,
                  pid, tile, Sk, S_OUT_V, Dv, vsb, vss, vsh, vsd, HKV,
                  MODE, 1, False, HAD, HBLOCK_V, HSTAGES_V, True, PER_TENSOR, BS, BD_V, FMA_DIV)


@triton.jit
def _sums_pass(k_ptr, v_ptr, sums_ptr, v_amax, dummy, Sk, D, Dv, ksb, kss, ksh, ksd, vsb, vss, vsh, vsd, HKV,
               NCHUNK, TILES, NTV, SMOOTH: tl.constexpr, V_AMAX: tl.constexpr, BS: tl.constexpr, BD: tl.constexpr,
               BS_V: tl.constexpr, BD_V: tl.constexpr, FMA_DIV: tl.constexpr):
    """What must be known before the codes: grid (batch * kv heads, chunks or tiles, 2). Axis
    2 = 0 (SMOOTH): smooth_k's sums, a program adding the finite values of TILES tiles of BS
    keys elementwise in float64 (exact for bf16 / fp16 inputs, so the order is free), reducing
    them once and adding them and the finite counts to its kv head's row of ``sums_ptr`` (BD
    sums, BD counts) by atomics; 1 (V_AMAX): a tile of BS_V tokens of v's finite amax."""
    pid = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    if tl.program_id(2) == 0:
        if SMOOTH:
            if chunk < NCHUNK:
                b = pid // HKV
                h = pid % HKV
                d = tl.arange(0, BD)
                dmask = d < D
                acc = tl.zeros((BS, BD), tl.float64)
                cnt = tl.zeros((BS, BD), tl.int32)
                for t in range(TILES):
                    s = (chunk * TILES + t) * BS + tl.arange(0, BS)
                    m = (s[:, None] < Sk) & dmask[None, :]
                    x = tl.load(k_ptr + b * ksb + s[:, None] * kss + h * ksh + d[None, :] * ksd, mask=m,
                                other=0.0).to(tl.float32)
                    fin = m & (tl.abs(x) < float("inf"))
                    acc += tl.where(fin, x.to(tl.float64), 0.0)
                    cnt += fin.to(tl.int32)
                row = sums_ptr + pid * 2 * BD
                tl.atomic_add(row + d, tl.sum(acc, axis=0))
                tl.atomic_add(row + BD + d, tl.sum(cnt, axis=0).to(tl.float64))
    else:
        if V_AMAX:
            if chunk < NTV:
                quantize_tile(v_ptr, dummy, dummy, dummy, dummy, v_amax, dummy, pid, chunk, Sk, Sk, Dv,
                      vsb, vss, vsh, vsd, HKV, 1, 1, False, False, 1, 0, False, False, BS_V, BD_V, FMA_DIV)


@triton.jit
def channel_mean(sums_ptr, pid, d, BD: tl.constexpr):
    """smooth_k's mean of kv head ``pid`` from its row of _sums_pass's sums: the float64 sum
    over the finite count (at least 1), rounded once to float32, as zyfa.quantize.smooth_mean
    (zero past D)."""
    row = sums_ptr + pid * 2 * BD
    return (tl.load(row + d) / tl.maximum(tl.load(row + BD + d), 1.0)).to(tl.float32)


SUM_PROGRAMS = 1024    # about: enough programs to keep 132 SMs' loads in flight


def channel_sums(k, v=None, smooth: bool = True):
    """_sums_pass's launch: (sums (B * Hkv, 2, BD) float64, v's amax bits (B * Hkv,) int32 or
    None), one zeroed buffer. The sums' chunks are as many tiles as leave ~SUM_PROGRAMS programs."""
    B, S, H, D = k.shape
    bd = next_power_of_2(D)
    rows = sum_rows(bd)
    tiles = cdiv(S, rows)
    per = max(1, min(tiles, next_power_of_2(cdiv(tiles * B * H, SUM_PROGRAMS))))
    nchunk = cdiv(tiles, per) if smooth else 0
    n = B * H * 2 * bd
    ws = torch.zeros(n + (B * H + 1) // 2, dtype=torch.float64, device=k.device)
    v_amax = ws[n:].view(torch.int32)[:B * H] if v is not None else None
    vv = v if v is not None else k
    ntv = cdiv(S, BLOCK_S) if v is not None else 0
    _sums_pass[(B * H, max(nchunk, ntv, 1), 2)](
        k, vv, ws, v_amax if v is not None else ws, dummy_pointer(k.device), S, D, vv.shape[-1], *k.stride(), *vv.stride(), H,
        nchunk, per, ntv, SMOOTH=smooth, V_AMAX=v is not None, BS=rows, BD=bd, BS_V=BLOCK_S,
        BD_V=next_power_of_2(vv.shape[-1]), FMA_DIV=not interpreter_active())
    return ws[:n].view(B * H, 2, bd), v_amax


@functools.lru_cache(maxsize=64)
def rotation_parts(n, seed, device):
    """(row signs padded to a power of two, [scale], block) on the device, made once: a tensor
    copied from the host a call would wait for the GPU's queue (pageable copies synchronize)."""
    signs, block, scale = hadamard_parts(n, seed)
    padded = torch.zeros(next_power_of_2(n), dtype=torch.float32)
    padded[:n] = signs.float()
    return padded.to(device), torch.tensor([scale], dtype=torch.float32).to(device), block


@functools.lru_cache(maxsize=16)
def dummy_pointer(device):
    """A pointer for the arguments a specialization does not read (never written)."""
    return torch.zeros(1, dtype=torch.float32, device=device)


@functools.lru_cache(maxsize=64)
def _v_rotation(n, seed, device):
    """V's rotation matrix (float32) on the device, made once."""
    return hadamard_matrix(n, seed).float().to(device)


def _qkv_passes(q, k, v, group, granularity, dummy, had_qk=None, had_v=None, sums=None):
    """The amax launch, then the quantize launch (which computes the descales), each over q, k
    and v at once: (q codes, k codes, V^T codes (B, Hkv, Dv, Sk padded to 16), descales)."""
    B, Sq, Hq, D = q.shape
    Sk, Hkv, Dv = k.shape[1], k.shape[2], v.shape[-1]
    slots = 1 if granularity == "tensor" else B * Hkv
    amax = torch.zeros(3 * slots, dtype=torch.int32, device=q.device)        # float bits of 0.0
    descale = torch.empty(3 * slots, dtype=torch.float32, device=q.device)
    q8 = torch.empty(B, Sq, Hq, D, dtype=torch.uint8, device=q.device)
    k8 = torch.empty(B, Sk, Hkv, D, dtype=torch.uint8, device=q.device)
    vt = torch.empty(B, Hkv, Dv, Sk + (-Sk) % 16, dtype=torch.uint8, device=q.device)
    bd, bd_v = next_power_of_2(D), next_power_of_2(Dv)
    rows = tile_rows(max(bd, bd_v)) if had_qk is not None else BLOCK_S
    ntq, ntk, ntv = (cdiv(n, rows) for n in (Sq, Sk, vt.shape[-1]))
    signs_qk, scale_qk, block_qk = had_qk if had_qk is not None else (dummy, dummy, 1)
    signs_v, scale_v, block_v = had_v if had_v is not None else (dummy, dummy, 1)
    for mode in (1, 2):
        _quant_qkv[(B * Hkv, max(ntq, ntk, ntv), 3)](
            q, k, v, q8, k8, vt, sums if sums is not None else dummy, signs_qk, scale_qk, signs_v, scale_v,
            amax, descale, dummy, Sq, Sk, vt.shape[-1], D, Dv, *q.stride(), *k.stride(), *v.stride(),
            Hkv, ntq, ntk, ntv, slots,
            MODE=mode, GROUP=Hq // Hkv, SMOOTH=sums is not None, HAD=had_qk is not None,
            HBLOCK_QK=block_qk, HSTAGES_QK=block_qk.bit_length() - 1, HBLOCK_V=block_v,
            HSTAGES_V=block_v.bit_length() - 1, PER_TENSOR=granularity == "tensor", BS=rows,
            BD_QK=bd, BD_V=bd_v, FMA_DIV=not interpreter_active())
    shape = () if granularity == "tensor" else (B, Hkv)
    qd, kd, vd = (descale[i * slots:(i + 1) * slots].reshape(shape) for i in range(3))
    return q8, k8, vt, (qd, kd, vd)


def quantize_fp8_fused(q, k, v, granularity: str = "head", smooth_k: bool = False, hadamard: bool = False,
                       seed: int = 0) -> FP8Inputs:
    """quantize_fp8 in Triton kernels, bit for bit (granularity "head" or "tensor")."""
    _, _, Hq, D, Hkv, Dv = check_inputs(q, k, v, granularity, 64, seed)
    if granularity not in ("head", "tensor"):
        raise ValueError(f"the fused quantizer supports granularity 'head' and 'tensor', not {granularity!r}; "
                         "use fused=False")
    dummy = dummy_pointer(q.device)
    had_qk = rotation_parts(D, seed, q.device) if hadamard else None
    had_v = rotation_parts(Dv, seed + 1, q.device) if hadamard else None
    sums = channel_sums(k)[0] if smooth_k else None
    q8, k8, vt, (qd, kd, vd) = _qkv_passes(q, k, v, Hq // Hkv, granularity, dummy, had_qk, had_v, sums)
    f8 = torch.float8_e4m3fn
    v8 = vt.view(f8)[..., :k.shape[1]].permute(0, 3, 1, 2)
    v_rot = _v_rotation(Dv, seed + 1, q.device).clone() if hadamard else None   # the caller's own copy
    return FP8Inputs(q8.view(f8), k8.view(f8), v8, qd, kd, vd, v_rot)
