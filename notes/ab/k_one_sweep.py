"""Lab prototype (not the package): the INT8 Q.K^T mode's k codes in ONE sweep a 128-key block.

quantize_int8.py's k path (_int8_rows, PER_ROW=False) sweeps a key block twice (amax, then
codes), loading, smoothing and rotating every tile in both. Here a program per (batch * kv
head, 128-key block) loads the block once as NSPLIT sub-tiles of 128 / NSPLIT rows kept live
(NSPLIT = 1: the whole 128 x BD block as one tensor), smooths, rotates (butterflies IN_RUNS),
takes the finite amax (_largest) and the non-finite count, then writes the codes and the
block's descale exactly as _int8_rows does for k (same bits: non-finite -> code 0, NaN descale).
It uses the INT8 quantizer's instruction cuts (butterflies IN_RUNS, _largest, _descale), on
main since session n (4820ced).

    # bits against zyfa.quantize.quantize_int8_qk(..., fused=False) in Triton's interpreter
    TRITON_INTERPRET=1 PYTHONPATH=. python3 notes/ab/k_one_sweep.py check
    # sm_90a compile: registers, spills, shared, SASS instruction counts (no GPU needed)
    PYTHONPATH=. python3 notes/ab/k_one_sweep.py compile
    PYTHONPATH=. python3 notes/ab/k_one_sweep.py compile_m32      # the MEAN_F32 variants
    python3 notes/ab/k_one_sweep_count.py /tmp/ksweep/sass        # instructions an element
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

import torch
import triton
import triton.language as tl

from zyfa.device import interpreter_active
from zyfa.spec.constants import MAGIC, MAGIC_BITS
from zyfa.triton_kernels.quantize import butterflies, channel_mean, channel_sums, quotient, rotation_parts, tile_rows
from zyfa.triton_kernels.quantize_int8 import _descale, _int8_rows, _largest

_MAG: tl.constexpr = tl.constexpr(MAGIC)
_MAG_BITS: tl.constexpr = tl.constexpr(MAGIC_BITS)
KB = 128


@triton.jit
def _k_load(k_ptr, b, h, r0, hi, c0, D, ksb, kss, ksh, ksd, R: tl.constexpr, C: tl.constexpr):
    """Rows r0.. (R) and columns c0.. (C) of k, as loaded (zeros where masked)."""
    s = r0 + tl.arange(0, R)
    d = c0 + tl.arange(0, C)
    m = (s[:, None] < hi) & (d < D)[None, :]
    return tl.load(k_ptr + b * ksb + s[:, None] * kss + h * ksh + d[None, :] * ksd, mask=m, other=0.0)


@triton.jit
def _k_prep(raw, r0, hi, c0, D, mean, signs, hscale, SMOOTH: tl.constexpr, HAD: tl.constexpr,
            HBLOCK: tl.constexpr, HSTAGES: tl.constexpr, R: tl.constexpr, C: tl.constexpr):
    """_smoothed_rotated's arithmetic on a loaded part: (rotated values with non-finite ones
    zeroed, finite amax, any non-finite)."""
    s = r0 + tl.arange(0, R)
    d = c0 + tl.arange(0, C)
    m = (s[:, None] < hi) & (d < D)[None, :]
    x = raw.to(tl.float32)
    if SMOOTH:
        x = x - mean[None, :]
    if HAD:
        x = butterflies(x * signs[None, :], HBLOCK, R, C, HSTAGES, True) * hscale
    fin = tl.abs(x) < float("inf")
    bad = tl.max(tl.max(tl.where(fin, 0, m.to(tl.int32)), axis=1), axis=0)
    amax = _largest(_largest(tl.where(fin & m, tl.abs(x), 0.0), 1), 0)
    return tl.where(fin, x, 0.0), amax, bad


@triton.jit
def _k_part(k_ptr, b, h, r0, hi, c0, D, ksb, kss, ksh, ksd, mean, signs, hscale, SMOOTH: tl.constexpr,
            HAD: tl.constexpr, HBLOCK: tl.constexpr, HSTAGES: tl.constexpr, R: tl.constexpr, C: tl.constexpr):
    raw = _k_load(k_ptr, b, h, r0, hi, c0, D, ksb, kss, ksh, ksd, R, C)
    return _k_prep(raw, r0, hi, c0, D, mean, signs, hscale, SMOOTH, HAD, HBLOCK, HSTAGES, R, C)


@triton.jit
def _k_emit(x, one, out_ptr, b, h, r0, hi, c0, S, D, H, R: tl.constexpr, C: tl.constexpr, FMA_DIV: tl.constexpr):
    """_int8_rows' code sweep for a part already rotated (non-finite zeroed)."""
    s = r0 + tl.arange(0, R)
    d = c0 + tl.arange(0, C)
    m = (s[:, None] < hi) & (d < D)[None, :]
    descale = tl.zeros((R,), tl.float32) + one
    y = quotient(x, descale[:, None], FMA_DIV)
    code = (y + _MAG).to(tl.int32, bitcast=True) - _MAG_BITS             # round half to even
    tl.store(out_ptr + ((b * S + s[:, None]) * H + h) * D + d[None, :], code.to(tl.int8), mask=m)


@triton.jit
def _rotation_of(signs_ptr, scale_ptr, d, HAD: tl.constexpr):
    """The rotation's row signs and scale (ones where HAD is off), as _int8_qkv loads them."""
    signs = d * 0.0
    hscale = 1.0
    if HAD:
        signs = tl.load(signs_ptr + d)
        hscale = tl.load(scale_ptr)
    return signs, hscale


@triton.jit
def _int8_k_one_sweep(k_ptr, k_out, kd_ptr, sums_ptr, signs_ptr, scale_ptr, Sk, D, ksb, kss, ksh, ksd, HKV, NTK,
                      SMOOTH: tl.constexpr, HAD: tl.constexpr, HBLOCK: tl.constexpr, HSTAGES: tl.constexpr,
                      NSPLIT: tl.constexpr, LOADS_FIRST: tl.constexpr, BD: tl.constexpr, FMA_DIV: tl.constexpr,
                      MEAN_F32: tl.constexpr = False):
    """Grid (batch * kv heads, key blocks of 128): codes (B, Sk, HKV, D) int8, descales (B, HKV, NTK).
    The block as NSPLIT (1, 2, 4) parts of 128 / NSPLIT rows, all live; LOADS_FIRST: every
    part's load issued before any arithmetic. MEAN_F32: sums_ptr holds smooth_k's float32
    means (B * HKV, BD), made once by _k_means, instead of _sums_pass's float64 sums (the
    same bits; each program's float64 divisions, a column a thread, gone)."""
    pid = tl.program_id(0).to(tl.int64)
    tile = tl.program_id(1)
    b = pid // HKV
    h = pid % HKV
    d = tl.arange(0, BD)
    signs, hscale = _rotation_of(signs_ptr, scale_ptr, d, HAD)
    mean = d * 0.0
    if SMOOTH:
        if MEAN_F32:
            mean = tl.load(sums_ptr + pid * BD + d)
        else:
            mean = channel_mean(sums_ptr, pid, d, BD)
    lo = tile * 128
    hi = tl.minimum(lo + 128, Sk)
    R: tl.constexpr = 128 // NSPLIT
    if LOADS_FIRST:
        r0 = _k_load(k_ptr, b, h, lo, hi, 0, D, ksb, kss, ksh, ksd, R, BD)
        if NSPLIT >= 2:
            r1 = _k_load(k_ptr, b, h, lo + R, hi, 0, D, ksb, kss, ksh, ksd, R, BD)
        if NSPLIT >= 4:
            r2 = _k_load(k_ptr, b, h, lo + 2 * R, hi, 0, D, ksb, kss, ksh, ksd, R, BD)
            r3 = _k_load(k_ptr, b, h, lo + 3 * R, hi, 0, D, ksb, kss, ksh, ksd, R, BD)
        x0, amax, nbad = _k_prep(r0, lo, hi, 0, D, mean, signs, hscale, SMOOTH, HAD, HBLOCK, HSTAGES, R, BD)
        if NSPLIT >= 2:
            x1, a1, n1 = _k_prep(r1, lo + R, hi, 0, D, mean, signs, hscale, SMOOTH, HAD, HBLOCK, HSTAGES, R, BD)
            amax = tl.maximum(amax, a1)
            nbad = tl.maximum(nbad, n1)
        if NSPLIT >= 4:
            x2, a2, n2 = _k_prep(r2, lo + 2 * R, hi, 0, D, mean, signs, hscale, SMOOTH, HAD, HBLOCK, HSTAGES, R, BD)
            x3, a3, n3 = _k_prep(r3, lo + 3 * R, hi, 0, D, mean, signs, hscale, SMOOTH, HAD, HBLOCK, HSTAGES, R, BD)
            amax = tl.maximum(amax, tl.maximum(a2, a3))
            nbad = tl.maximum(nbad, tl.maximum(n2, n3))
    else:
        x0, amax, nbad = _k_part(k_ptr, b, h, lo, hi, 0, D, ksb, kss, ksh, ksd, mean, signs, hscale, SMOOTH, HAD,
                                 HBLOCK, HSTAGES, R, BD)
        if NSPLIT >= 2:
            x1, a1, n1 = _k_part(k_ptr, b, h, lo + R, hi, 0, D, ksb, kss, ksh, ksd, mean, signs, hscale, SMOOTH, HAD,
                                 HBLOCK, HSTAGES, R, BD)
            amax = tl.maximum(amax, a1)
            nbad = tl.maximum(nbad, n1)
        if NSPLIT >= 4:
            x2, a2, n2 = _k_part(k_ptr, b, h, lo + 2 * R, hi, 0, D, ksb, kss, ksh, ksd, mean, signs, hscale, SMOOTH,
                                 HAD, HBLOCK, HSTAGES, R, BD)
            x3, a3, n3 = _k_part(k_ptr, b, h, lo + 3 * R, hi, 0, D, ksb, kss, ksh, ksd, mean, signs, hscale, SMOOTH,
                                 HAD, HBLOCK, HSTAGES, R, BD)
            amax = tl.maximum(amax, tl.maximum(a2, a3))
            nbad = tl.maximum(nbad, tl.maximum(n2, n3))
    one = _descale(amax, FMA_DIV)
    _k_emit(x0, one, k_out, b, h, lo, hi, 0, Sk, D, HKV, R, BD, FMA_DIV)
    if NSPLIT >= 2:
        _k_emit(x1, one, k_out, b, h, lo + R, hi, 0, Sk, D, HKV, R, BD, FMA_DIV)
    if NSPLIT >= 4:
        _k_emit(x2, one, k_out, b, h, lo + 2 * R, hi, 0, Sk, D, HKV, R, BD, FMA_DIV)
        _k_emit(x3, one, k_out, b, h, lo + 3 * R, hi, 0, Sk, D, HKV, R, BD, FMA_DIV)
    tl.store(kd_ptr + pid * NTK + tile, tl.where(nbad == 0, one, float("nan")))


@triton.jit
def _int8_k_one_sweep_192(k_ptr, k_out, kd_ptr, sums_ptr, signs_ptr, scale_ptr, Sk, D, ksb, kss, ksh, ksd, HKV,
                          NTK, SMOOTH: tl.constexpr, HAD: tl.constexpr, HBLOCK: tl.constexpr, HSTAGES: tl.constexpr,
                          NSPLIT: tl.constexpr, LOADS_FIRST: tl.constexpr, BD: tl.constexpr,
                          FMA_DIV: tl.constexpr, MEAN_F32: tl.constexpr = False):
    """_int8_k_one_sweep for D = 192 (rotation blocks of 64) without the padding: columns 0-127
    and 128-191 as separate parts (the rotation never mixes them); NSPLIT 1 or 2 row parts.
    Registers and instructions for 192 columns, not 256. (BD unused: 256.)"""
    pid = tl.program_id(0).to(tl.int64)
    tile = tl.program_id(1)
    b = pid // HKV
    h = pid % HKV
    da = tl.arange(0, 128)
    db = 128 + tl.arange(0, 64)
    sa = da * 0.0
    sb = db * 0.0
    hscale = 1.0
    if HAD:
        sa = tl.load(signs_ptr + da)
        sb = tl.load(signs_ptr + db)
        hscale = tl.load(scale_ptr)
    ma = da * 0.0
    mb = db * 0.0
    if SMOOTH:
        if MEAN_F32:
            ma = tl.load(sums_ptr + pid * BD + da)
            mb = tl.load(sums_ptr + pid * BD + db)
        else:
            ma = channel_mean(sums_ptr, pid, da, BD)
            mb = channel_mean(sums_ptr, pid, db, BD)
    lo = tile * 128
    hi = tl.minimum(lo + 128, Sk)
    R: tl.constexpr = 128 // NSPLIT
    if LOADS_FIRST:
        ra0 = _k_load(k_ptr, b, h, lo, hi, 0, D, ksb, kss, ksh, ksd, R, 128)
        rb0 = _k_load(k_ptr, b, h, lo, hi, 128, D, ksb, kss, ksh, ksd, R, 64)
        if NSPLIT >= 2:
            ra1 = _k_load(k_ptr, b, h, lo + R, hi, 0, D, ksb, kss, ksh, ksd, R, 128)
            rb1 = _k_load(k_ptr, b, h, lo + R, hi, 128, D, ksb, kss, ksh, ksd, R, 64)
        xa0, amax, nbad = _k_prep(ra0, lo, hi, 0, D, ma, sa, hscale, SMOOTH, HAD, HBLOCK, HSTAGES, R, 128)
        xb0, a, n = _k_prep(rb0, lo, hi, 128, D, mb, sb, hscale, SMOOTH, HAD, HBLOCK, HSTAGES, R, 64)
        amax = tl.maximum(amax, a)
        nbad = tl.maximum(nbad, n)
        if NSPLIT >= 2:
            xa1, a, n = _k_prep(ra1, lo + R, hi, 0, D, ma, sa, hscale, SMOOTH, HAD, HBLOCK, HSTAGES, R, 128)
            amax = tl.maximum(amax, a)
            nbad = tl.maximum(nbad, n)
            xb1, a, n = _k_prep(rb1, lo + R, hi, 128, D, mb, sb, hscale, SMOOTH, HAD, HBLOCK, HSTAGES, R, 64)
            amax = tl.maximum(amax, a)
            nbad = tl.maximum(nbad, n)
    else:
        xa0, amax, nbad = _k_part(k_ptr, b, h, lo, hi, 0, D, ksb, kss, ksh, ksd, ma, sa, hscale, SMOOTH, HAD,
                                  HBLOCK, HSTAGES, R, 128)
        xb0, a, n = _k_part(k_ptr, b, h, lo, hi, 128, D, ksb, kss, ksh, ksd, mb, sb, hscale, SMOOTH, HAD,
                            HBLOCK, HSTAGES, R, 64)
        amax = tl.maximum(amax, a)
        nbad = tl.maximum(nbad, n)
        if NSPLIT >= 2:
            xa1, a, n = _k_part(k_ptr, b, h, lo + R, hi, 0, D, ksb, kss, ksh, ksd, ma, sa, hscale, SMOOTH, HAD,
                                HBLOCK, HSTAGES, R, 128)
            amax = tl.maximum(amax, a)
            nbad = tl.maximum(nbad, n)
            xb1, a, n = _k_part(k_ptr, b, h, lo + R, hi, 128, D, ksb, kss, ksh, ksd, mb, sb, hscale, SMOOTH, HAD,
                                HBLOCK, HSTAGES, R, 64)
            amax = tl.maximum(amax, a)
            nbad = tl.maximum(nbad, n)
    one = _descale(amax, FMA_DIV)
    _k_emit(xa0, one, k_out, b, h, lo, hi, 0, Sk, D, HKV, R, 128, FMA_DIV)
    _k_emit(xb0, one, k_out, b, h, lo, hi, 128, Sk, D, HKV, R, 64, FMA_DIV)
    if NSPLIT >= 2:
        _k_emit(xa1, one, k_out, b, h, lo + R, hi, 0, Sk, D, HKV, R, 128, FMA_DIV)
        _k_emit(xb1, one, k_out, b, h, lo + R, hi, 128, Sk, D, HKV, R, 64, FMA_DIV)
    tl.store(kd_ptr + pid * NTK + tile, tl.where(nbad == 0, one, float("nan")))


@triton.jit
def _k_means(sums_ptr, means_ptr, BD: tl.constexpr):
    """smooth_k's float32 means (channel_mean's bits) of kv head program_id(0), once."""
    pid = tl.program_id(0).to(tl.int64)
    d = tl.arange(0, BD)
    tl.store(means_ptr + pid * BD + d, channel_mean(sums_ptr, pid, d, BD))


@triton.jit
def _int8_k_two_sweeps(k_ptr, k_out, kd_ptr, sums_ptr, signs_ptr, scale_ptr, Sk, D, ksb, kss, ksh, ksd, HKV, NTK,
                       SMOOTH: tl.constexpr, HAD: tl.constexpr, HBLOCK: tl.constexpr, HSTAGES: tl.constexpr,
                       NSUB_K: tl.constexpr, BS: tl.constexpr, BD: tl.constexpr, FMA_DIV: tl.constexpr):
    """The package's k path alone (_int8_qkv's which == 1 branch, same call), for comparison."""
    pid = tl.program_id(0).to(tl.int64)
    tile = tl.program_id(1)
    b = pid // HKV
    hk = pid % HKV
    d = tl.arange(0, BD)
    signs, hscale = _rotation_of(signs_ptr, scale_ptr, d, HAD)
    mean = d * 0.0
    if SMOOTH:
        mean = channel_mean(sums_ptr, pid, d, BD)
    _int8_rows(k_ptr, k_out, kd_ptr, mean, signs, hscale, b, hk, tile * 128, tl.minimum(tile * 128 + 128, Sk), Sk, D,
               ksb, kss, ksh, ksd, HKV, pid * NTK + tile, SMOOTH, HAD, HBLOCK, HSTAGES, False, True, NSUB_K, BS, BD,
               FMA_DIV)


def quantize_k(k, seed=0, smooth_k=True, hadamard=True, num_warps=4, nsplit=1, two_sweeps=False, loads_first=False,
               cols192=False, mean_f32=False):
    """k's int8 codes (B, Sk, Hkv, D) and descales (B, Hkv, ceil(Sk / 128)), as quantize_int8_qk's."""
    B, Sk, Hkv, D = k.shape
    dev = k.device
    dummy = torch.zeros(1, dtype=torch.float32, device=dev)
    signs, scale, block = rotation_parts(D, seed, dev) if hadamard else (dummy, dummy, 1)
    sums, _ = channel_sums(k, None, smooth=smooth_k)
    bd = triton.next_power_of_2(D)
    ntk = triton.cdiv(Sk, KB)
    k8 = torch.empty(B, Sk, Hkv, D, dtype=torch.int8, device=dev)
    kd = torch.empty(B, Hkv, ntk, dtype=torch.float32, device=dev)
    common = dict(SMOOTH=smooth_k, HAD=hadamard, HBLOCK=block, HSTAGES=block.bit_length() - 1, BD=bd,
                  FMA_DIV=not interpreter_active(), num_warps=num_warps)
    if mean_f32 and smooth_k and not two_sweeps:
        means = torch.empty(B * Hkv, bd, dtype=torch.float32, device=dev)
        _k_means[(B * Hkv,)](sums, means, BD=bd)
        sums = means
        common["MEAN_F32"] = True
    args = (k, k8, kd, sums, signs, scale, Sk, D, *k.stride(), Hkv, ntk)
    if two_sweeps:
        rows = tile_rows(bd)
        _int8_k_two_sweeps[(B * Hkv, ntk)](*args, NSUB_K=triton.cdiv(KB, rows), BS=rows, **common)
    elif cols192:
        assert D == 192 and block == 64 or not hadamard
        _int8_k_one_sweep_192[(B * Hkv, ntk)](*args, NSPLIT=nsplit, LOADS_FIRST=loads_first, **common)
    else:
        _int8_k_one_sweep[(B * Hkv, ntk)](*args, NSPLIT=nsplit, LOADS_FIRST=loads_first, **common)
    return k8, kd


def check():
    from zyfa.quantize import quantize_int8_qk
    fails = 0
    for D in (64, 128, 192):
        for Sk in (77, 200, 300):
            for smooth, had in ((True, True), (False, True), (True, False)):
                g = torch.Generator().manual_seed(D * 1000 + Sk)
                B, Hkv, Hq = 2, 2, 4
                q = torch.randn(B, 5, Hq, D, generator=g).bfloat16()
                k = (torch.randn(B, Sk, Hkv, D, generator=g) * 3 + torch.randn(D, generator=g)).bfloat16()
                v = torch.randn(B, Sk, Hkv, 64, generator=g).bfloat16()
                k[0, 5, 1, 3] = float("nan")
                k[1, min(150, Sk - 1), 0, D - 1] = float("inf")
                ref = quantize_int8_qk(q, k, v, smooth_k=smooth, hadamard=had, fused=False)
                variants = [dict(two_sweeps=True)] + [dict(nsplit=n, loads_first=lf) for n in (1, 2, 4)
                                                      for lf in (False, True)]
                variants += [dict(nsplit=n, mean_f32=True) for n in (1, 2)]
                if D == 192:
                    variants += [dict(nsplit=n, loads_first=lf, cols192=True) for n in (1, 2) for lf in (False, True)]
                    variants += [dict(nsplit=n, cols192=True, mean_f32=True) for n in (1, 2)]
                for var in variants:
                    k8, kd = quantize_k(k, smooth_k=smooth, hadamard=had, **var)
                    ok = torch.equal(k8, ref.k) and torch.equal(kd.view(torch.int32), ref.k_descale.view(torch.int32))
                    fails += not ok
                    print(f"D {D} Sk {Sk} smooth {smooth} had {had} {var}: {'equal' if ok else 'DIFFER'}"
                          f" (kd {tuple(kd.shape)}, NaN descales {int(kd.isnan().sum())}, "
                          f"nonzero codes {int((k8 != 0).sum())} of {k8.numel()})")
    print("all bit-equal" if not fails else f"{fails} differ")


# ---- sm_90a compile and SASS counts --------------------------------------------------------------
def _bin(name):
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def compile_k(fn, consts, num_warps, dtype="*bf16", maxnreg=None):
    """As Triton's launcher specializes at run time: pointers and ints divisible by 16 marked,
    the unit channel stride (ksd == 1) a constant."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    names = fn.arg_names
    sig = {"k_ptr": dtype, "k_out": "*i8", "kd_ptr": "*fp32", "sums_ptr": "*fp32" if consts.get("MEAN_F32") else "*fp64", "signs_ptr": "*fp32",
           "scale_ptr": "*fp32", **{n: "i32" for n in ("Sk", "D", "ksb", "kss", "ksh", "HKV", "NTK")},
           "ksd": "constexpr"}
    consts = dict(consts, ksd=1)
    for n in consts:
        sig[n] = "constexpr"
    sig = {n: sig[n] for n in names}
    div16 = [n for n in names if sig[n].startswith("*") or n in ("D", "ksb", "kss", "ksh")]
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in div16}
    return triton.compile(ASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": num_warps, **({"maxnreg": maxnreg} if maxnreg else {})})


def sass_of(k, name):
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "k.cubin")
        open(p, "wb").write(k.asm["cubin"])
        sass = subprocess.run([_bin("cuobjdump"), "-sass", p], capture_output=True, text=True, check=True).stdout
        res = subprocess.run([_bin("cuobjdump"), "-res-usage", p], capture_output=True, text=True, check=True).stdout
    return sass, res


def resources(k):
    ptx = k.asm["ptx"]
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        open(src, "w").write(ptx)
        r = subprocess.run([_bin("ptxas"), "-arch=sm_90a", "-O3", "-v", src, "-o", os.path.join(d, "o.cubin")],
                           capture_output=True, text=True)
    rep = r.stderr + r.stdout
    regs = int(re.search(r"Used (\d+) registers", rep).group(1))
    st, ld = map(int, re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", rep).groups())
    return regs, st, ld, k.metadata.shared, rep


LINE = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s*/\*\s*0x[0-9a-f]+\s*\*/\s*$")


def instrs(sass):
    out = []
    for line in sass.splitlines():
        m = LINE.match(line)
        if m:
            out.append((int(m.group(1), 16), m.group(2)))
    return out


def main_compile(out_dir="/tmp/ksweep/sass", only_mean_f32=False):
    os.makedirs(out_dir, exist_ok=True)
    rows = []
    for label, D, block in (("Mistral d128", 128, 128), ("DeepSeek d192", 192, 64)):
        bd = triton.next_power_of_2(D)
        base = dict(SMOOTH=True, HAD=True, HBLOCK=block, HSTAGES=block.bit_length() - 1, BD=bd, FMA_DIV=True)
        variants = [("two", _int8_k_two_sweeps, dict(base, NSUB_K=KB // tile_rows(bd), BS=tile_rows(bd)), 4, None)]
        for nsplit in (1, 2, 4):
            for lf in (False, True):
                for w in (4, 8, 16):
                    variants.append((f"one_n{nsplit}{'_lf' if lf else ''}", _int8_k_one_sweep,
                                     dict(base, NSPLIT=nsplit, LOADS_FIRST=lf), w, None))
        if D == 192:
            for nsplit in (1, 2):
                for lf in (False, True):
                    for w in (4, 8, 16):
                        variants.append((f"c192_n{nsplit}{'_lf' if lf else ''}", _int8_k_one_sweep_192,
                                         dict(base, NSPLIT=nsplit, LOADS_FIRST=lf), w, None))
        for nsplit in (1, 2):          # two programs of 8 warps an SM need <= 128 registers
            variants.append((f"one_n{nsplit}_lf_r128", _int8_k_one_sweep, dict(base, NSPLIT=nsplit, LOADS_FIRST=True),
                             8, 128))
            if D == 192:
                variants.append((f"c192_n{nsplit}_lf_r128", _int8_k_one_sweep_192,
                                 dict(base, NSPLIT=nsplit, LOADS_FIRST=True), 8, 128))
        if only_mean_f32:
            variants = [(n + "_m32", f, dict(c, MEAN_F32=True), w, r) for n, f, c, w, r in variants[1:]
                        if "_lf" not in n or "r128" in n]
        for name, fn, consts, w, maxnreg in variants:
            tag = f"{label.split()[0]}__{name}_w{w}"
            try:
                k = compile_k(fn, consts, w, maxnreg=maxnreg)
            except Exception as e:          # noqa: BLE001
                print(tag, "FAILED", str(e).splitlines()[-1][:200])
                continue
            regs, st, ld, shared, _ = resources(k)
            sass, res = sass_of(k, fn.__name__)
            open(os.path.join(out_dir, tag + ".sass"), "w").write(sass)
            open(os.path.join(out_dir, tag + ".res"), "w").write(res)
            rows.append((tag, regs, st, ld, shared))
            print(f"{tag:34s} regs {regs:3d} spill st/ld {st}/{ld} shared {shared}", flush=True)
    return rows


if __name__ == "__main__":
    if sys.argv[1:2] == ["check"]:
        check()
    elif sys.argv[1:2] == ["compile_m32"]:
        main_compile(only_mean_f32=True)
    else:
        main_compile()
