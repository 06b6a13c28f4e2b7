"""FP8 (E4M3) quantization of q, k, v in the layouts zyfa's kernels read.

Options (on realistic inputs the rotation cuts E4M3's error by a third, K smoothing a little,
and the scale granularity barely moves it):
  granularity="head"  one scale per (batch, kv_head) for q, k and v (FlashAttention-3's layout);
  granularity="tensor" one scalar scale each for q, k and v (what cuDNN's FP8 attention takes);
  granularity="fine"  per block of ``block_size`` tokens for q (per head) and k, per channel for v;
  smooth_k            subtract k's mean over tokens: q.(k - mean) differs from q.k by a
                      constant per query row, so softmax is unchanged (LSE shifts by that constant);
  hadamard            a randomized Hadamard rotation R of the head dim: (qR)(kR)^T = qk^T, and
                      for v the output is rotated back (``FP8Inputs.restore_output``).

V is written transposed, (B, Hkv, Dv, Sk) in memory, viewed as (B, Sk, Hkv, Dv):
Hopper's FP8 wgmma reads both operands K-major, so P.V needs V^T in memory.
"""
from __future__ import annotations

import torch

from .batch_lengths import lengths
from .quantize_common import FP8Inputs, check_inputs, hadamard_matrix, hadamard_parts
from .spec.constants import AMAX_FLOOR, E4M3_MAX, INT8_MAX, KEY_BLOCK


def rotate(x: torch.Tensor, seed: int) -> torch.Tensor:
    """float32 x @ hadamard_matrix(D, seed) computed in one fixed order: x times the row signs
    (exact), Sylvester butterflies (a + b, a - b) from the widest stride down, each rounded
    to float32, then times the scale rounded to float32. The fused Triton kernel does the
    same operations, so both give the same bits (a float32 matmul's summation order is the
    BLAS's or the tensor core's own)."""
    D = x.shape[-1]
    signs, block, scale = hadamard_parts(D, seed)
    y = x * signs.to(device=x.device, dtype=torch.float32)
    shape = y.shape
    h = block // 2
    while h >= 1:
        y = y.reshape(*shape[:-1], D // (2 * h), 2, h)
        y = torch.stack((y[..., 0, :] + y[..., 1, :], y[..., 0, :] - y[..., 1, :]), dim=-2)
        h //= 2
    return y.reshape(shape) * torch.tensor(scale, dtype=torch.float32, device=x.device)


def smooth_mean(kf: torch.Tensor) -> torch.Tensor:
    """k's mean over tokens of the finite values, (B, 1, Hkv, D) float32: summed in float64
    (exact for bf16/fp16 inputs, so the summation order does not matter), rounded once."""
    finite = torch.isfinite(kf)
    total = torch.where(finite, kf.double(), 0.0).sum(dim=1, keepdim=True)
    return (total / finite.sum(dim=1, keepdim=True).clamp(min=1)).float()


def descale_of(amax: torch.Tensor, top: float = E4M3_MAX) -> torch.Tensor:
    """The descale of a finite amax: amax / top (the format's largest code), at least
    AMAX_FLOOR / top, correctly rounded. (top as a tensor on amax's device, filled there: PyTorch
    divides a CUDA tensor by a Python number as a multiply by its reciprocal, one ulp off on
    the H200, and a tensor copied from the host would synchronize.)"""
    return torch.clamp(amax, min=AMAX_FLOOR) / torch.full((), top, dtype=amax.dtype, device=amax.device)


def _finite_abs(x: torch.Tensor) -> torch.Tensor:
    """|x| with NaN and Inf as 0: scales come from the finite values, so one non-finite
    element cannot make a whole head's scale (and every value under it) NaN."""
    return torch.where(torch.isfinite(x), x.abs(), torch.zeros((), dtype=x.dtype, device=x.device))


def _to_e4m3(x: torch.Tensor, amax: torch.Tensor):
    """x / scale rounded to E4M3 with scale = amax / 448; returns (fp8, descale). Non-finite
    elements stay non-finite: NaN (E4M3 has no infinity), confined to their own element."""
    descale = descale_of(amax)
    scaled = (x / descale).clamp(-E4M3_MAX, E4M3_MAX)
    scaled = torch.where(torch.isfinite(x), scaled, torch.full((), float("nan"), device=x.device))
    return scaled.to(torch.float8_e4m3fn), descale.float()


def quantize_tokens(x: torch.Tensor):
    """Each vector along the last dimension to E4M3 with its own scale (a KV cache's per-token
    descales): x (..., d) -> (codes (..., d) float8_e4m3fn, descale (...) float32), the same
    rounding as quantize_fp8."""
    x8, d = _to_e4m3(x.float(), _finite_abs(x.float()).amax(-1, keepdim=True))
    return x8, d[..., 0]


def _block_amax(x: torch.Tensor, block: int) -> torch.Tensor:
    """(B, S, H, D) -> the finite amax of each block of ``block`` tokens (and head), repeated
    for each of its tokens: (B, S, H)."""
    B, S, H, D = x.shape
    pad = (-S) % block
    xp = torch.nn.functional.pad(_finite_abs(x), (0, 0, 0, 0, 0, pad))
    amax = xp.reshape(B, (S + pad) // block, block, H, D).amax(dim=(2, 4))        # (B, nb, H)
    return amax.repeat_interleave(block, dim=1)[:, :S]


def _per_token_blocks(x: torch.Tensor, block: int):
    """(B, S, H, D) -> fp8 and per-token descale (B, H, S) with one scale per block of tokens."""
    x8, d = _to_e4m3(x, _block_amax(x, block)[..., None])
    return x8, d[..., 0].permute(0, 2, 1).contiguous()


def _transpose_v(v8: torch.Tensor) -> torch.Tensor:
    """(B, Sk, Hkv, Dv) -> same shape, stored as (B, Hkv, Dv, Sk) with rows padded to 16 bytes (TMA)."""
    B, Sk, Hkv, Dv = v8.shape
    buf = torch.zeros(B, Hkv, Dv, Sk + (-Sk) % 16, dtype=torch.uint8, device=v8.device)
    buf[..., :Sk] = v8.view(torch.uint8).permute(0, 2, 3, 1)
    return buf.view(torch.float8_e4m3fn)[..., :Sk].permute(0, 3, 1, 2)


def _use_fused(fused, q, k, v, granularity: str) -> bool:
    """fused=None: the Triton kernel where it has run and gives quantize_fp8's bits (NVIDIA
    GPUs, granularity "head"/"tensor"), else PyTorch; True: the Triton kernel, or an error
    saying why not (on the CPU only under TRITON_INTERPRET=1); False: PyTorch."""
    if fused is not None and not isinstance(fused, bool):
        raise TypeError(f"fused must be None, True or False, got {fused!r}")
    on_cuda = all(x.is_cuda for x in (q, k, v))
    if fused is None:
        return on_cuda and torch.version.hip is None and granularity in ("head", "tensor")
    if not fused:
        return False
    if granularity not in ("head", "tensor"):
        raise ValueError(f"fused=True: the fused quantizer supports granularity 'head' and 'tensor', "
                         f"not {granularity!r}; use fused=False")
    import os
    if not on_cuda and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError("fused=True needs CUDA tensors (or TRITON_INTERPRET=1 to run the kernel in Triton's "
                         "interpreter on the CPU); use fused=False")
    return True


def quantize_fp8(q, k, v, granularity: str = "head", block_size: int = 64,
                 smooth_k: bool = False, hadamard: bool = False, seed: int = 0,
                 fused: bool | None = None) -> FP8Inputs:
    """Quantize q (B, Sq, Hq, D), k (B, Sk, Hkv, D), v (B, Sk, Hkv, Dv) to E4M3.

    Returns an ``FP8Inputs`` whose q/k/v/descales go straight into flash_attn_func.
    The default (``fused=None``) runs the fused Triton kernel (zyfa.triton_kernels.quantize)
    on NVIDIA GPUs for granularity "head"/"tensor" (the same bits as this PyTorch code, which
    runs everywhere else); ``fused=True`` asks for the kernel (on the CPU: Triton's
    interpreter), ``fused=False`` for PyTorch.
    """
    B, Sq, Hq, D, Hkv, Dv = check_inputs(q, k, v, granularity, block_size, seed)
    if _use_fused(fused, q, k, v, granularity):
        from .triton_kernels.quantize import quantize_fp8_fused
        return quantize_fp8_fused(q, k, v, granularity, smooth_k=smooth_k, hadamard=hadamard, seed=seed)
    qf, kf, vf = q.float(), k.float(), v.float()
    if smooth_k:                        # the mean over the finite values (non-finite ones stay put)
        kf = kf - smooth_mean(kf)
    v_rot = None
    if hadamard:
        qf, kf = rotate(qf, seed), rotate(kf, seed)
        vf = rotate(vf, seed + 1)
        v_rot = hadamard_matrix(Dv, seed + 1, q.device).float()

    group = Hq // Hkv
    if granularity == "head":
        # q's scale is shared by the query heads of a kv group (FlashAttention-3's descale layout)
        q_amax = _finite_abs(qf).reshape(B, Sq, Hkv, group, D).amax(dim=(1, 3, 4))     # (B, Hkv)
        q8, qd = _to_e4m3(qf, q_amax.repeat_interleave(group, 1)[:, None, :, None])
        qd = qd[:, 0, ::group, 0].contiguous()
        k8, kd = _to_e4m3(kf, _finite_abs(kf).amax(dim=(1, 3))[:, None, :, None])
        kd = kd[:, 0, :, 0].contiguous()
        v8, vd = _to_e4m3(vf, _finite_abs(vf).amax(dim=(1, 3))[:, None, :, None])
        vd = vd[:, 0, :, 0].contiguous()
    elif granularity == "tensor":
        (q8, qd), (k8, kd), (v8, vd) = (_to_e4m3(t, _finite_abs(t).amax()) for t in (qf, kf, vf))
    else:
        q8, qd = _per_token_blocks(qf, block_size)
        k8, kd = _per_token_blocks(kf, block_size)
        v8, vd = _to_e4m3(vf, _finite_abs(vf).amax(dim=1, keepdim=True))               # (B, 1, Hkv, Dv)
        vd = vd[:, 0].contiguous()
    return FP8Inputs(q8, k8, _transpose_v(v8), qd, kd, vd, v_rot)


def _to_int8(x: torch.Tensor, amax: torch.Tensor):
    """x / scale rounded half to even to int8 with scale = amax / 127: (int8, descale). A
    non-finite element becomes 0 and its descale NaN (one per token here), so the rows that
    see it, and only those, come out NaN."""
    descale = descale_of(amax, INT8_MAX)
    codes = torch.round(torch.clamp(x / descale, -INT8_MAX, INT8_MAX))
    finite = torch.isfinite(x)
    return torch.where(finite, codes, 0.0).to(torch.int8), descale.float(), finite.all(-1)


def per_key_block(kd: torch.Tensor, key_block: int) -> torch.Tensor:
    """k's per-token descales (B, Hkv, Sk), constant over each block of ``key_block`` keys, as
    one a block of KEY_BLOCK keys (B, Hkv, ceil(Sk / 128)) when key_block is KEY_BLOCK (the
    form the generated INT8 kernel takes), NaN for a block with a non-finite key; else as they
    are."""
    if key_block != KEY_BLOCK:
        return kd
    Sk = kd.shape[-1]
    pad = -Sk % KEY_BLOCK
    bad = torch.nn.functional.pad(kd.isnan(), (0, pad)).unflatten(-1, (-1, KEY_BLOCK)).any(-1)
    return torch.where(bad, float("nan"), kd[..., ::KEY_BLOCK]).contiguous()


def quantize_int8_qk(q, k, v, smooth_k: bool = True, hadamard: bool = True, seed: int = 0,
                     key_block: int = 128, fused: bool | None = None) -> FP8Inputs:
    """The INT8 Q.K^T mode: q and k to int8, v to E4M3, for flash_attn_func(**x.kwargs()).

    q and k are rotated by the randomized Hadamard matrix of the head dim (``hadamard``; q.k
    unchanged) after k is smoothed (``smooth_k``; softmax unchanged), then q gets one scale a
    token (and head) and k one a block of ``key_block`` keys (and kv head): descales q (B,
    Hq, Sq) and k (B, Hkv, ceil(Sk / 128)) a block of 128 keys at the default key_block (B,
    Hkv, Sk, a key, otherwise); int8's 7 bits against E4M3's 3 are what cut the error of
    Q.K^T. v is E4M3 with one scale a (batch, kv head), written transposed as quantize_fp8
    writes it, not rotated. The kernels' scores are exact integers, so every kernel and the
    spec agree bit for bit on them. Runs on the generated Hopper kernel (every head dim it takes,
    k descales a block), the Triton kernel and the reference. A non-finite q or k element
    becomes 0 and the descale of its token (q) or key block (k) NaN, so the rows that see it
    come out NaN and the others do not. ``fused`` as quantize_fp8's: the Triton quantizer (the
    same bits) by default on NVIDIA GPUs.
    """
    B, Sq, Hq, D, Hkv, Dv = check_inputs(q, k, v, "head", 64, seed)
    if not isinstance(key_block, int) or isinstance(key_block, bool) or key_block < 1:
        raise ValueError(f"key_block must be a positive int, got {key_block!r}")
    if _use_fused(fused, q, k, v, "head"):
        from .triton_kernels.quantize_int8 import quantize_int8_qk_fused
        return quantize_int8_qk_fused(q, k, v, smooth_k=smooth_k, hadamard=hadamard, seed=seed, key_block=key_block)
    qf, kf, vf = q.float(), k.float(), v.float()
    if smooth_k:
        kf = kf - smooth_mean(kf)
    if hadamard:
        qf, kf = rotate(qf, seed), rotate(kf, seed)
    q8, qd, q_ok = _to_int8(qf, _finite_abs(qf).amax(-1, keepdim=True))                  # per token
    k8, kd, k_ok = _to_int8(kf, _block_amax(kf, key_block)[..., None])                   # per key block
    nan = torch.full((), float("nan"), device=q.device)
    qd = torch.where(q_ok, qd[..., 0], nan).permute(0, 2, 1).contiguous()                # (B, Hq, Sq)
    kd = torch.where(k_ok, kd[..., 0], nan).permute(0, 2, 1).contiguous()                # (B, Hkv, Sk)
    v8, vd = _to_e4m3(vf, _finite_abs(vf).amax(dim=(1, 3))[:, None, :, None])
    return FP8Inputs(q8, k8, _transpose_v(v8), qd, per_key_block(kd, key_block), vd[:, 0, :, 0].contiguous())


def quantize_fp8_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, **options) -> FP8Inputs:
    """quantize_fp8 for a packed (varlen) batch: q (total_q, heads, d), k, v (total_k, kv_heads,
    d[_v]) with int32 cu_seqlens as flash_attn_varlen_func takes them. Each sequence is quantized
    on its own (``options`` as quantize_fp8's; granularity "head" or "tensor"), so its descales
    come from its own tokens: q_descale, k_descale, v_descale (batch, kv_heads), the shape
    flash_attn_varlen_func takes; q, k, v packed in E4M3 (v contiguous). Pass
    ``**x.kwargs()`` with the cu_seqlens (and max_seqlen) to flash_attn_varlen_func."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or x.dim() != 3:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"{name} must be a 3-D packed tensor (total, heads, head_dim), got {got}")
    if options.get("granularity", "head") not in ("head", "tensor"):
        raise ValueError(f"granularity must be 'head' or 'tensor' for a packed batch (descales per sequence and "
                         f"kv head), got {options['granularity']!r}")
    if options.get("hadamard"):
        raise ValueError("hadamard=True is not supported for a packed batch (its output rotation is per dense batch)")
    q_lens = lengths("cu_seqlens_q", cu_seqlens_q, q.shape[0], "total tokens of q (q.shape[0])")
    k_lens = lengths("cu_seqlens_k", cu_seqlens_k, k.shape[0], "total tokens of k (k.shape[0])")
    if len(q_lens) != len(k_lens):
        raise ValueError(f"cu_seqlens_q has {len(q_lens) + 1} entries, cu_seqlens_k {len(k_lens) + 1}: "
                         "q and k must have the same batch size")
    if k.shape[:2] != v.shape[:2]:
        raise ValueError(f"k and v must agree in (total_k, kv_heads): k {tuple(k.shape)}, v {tuple(v.shape)}")
    hkv = k.shape[1]
    parts, a, c = [], 0, 0
    for i, (sq, sk) in enumerate(zip(q_lens, k_lens)):
        if sq == 0 or sk == 0:           # nothing to scale: zero bytes, unit descales
            qi, ki, vi = (x[None, s:s + n].clone() for x, s, n in ((q, a, sq), (k, c, sk), (v, c, sk)))
            ones = torch.ones(1, hkv, dtype=torch.float32, device=q.device)
            x = FP8Inputs(qi.to(torch.float8_e4m3fn), ki.to(torch.float8_e4m3fn), vi.to(torch.float8_e4m3fn),
                          ones, ones, ones)
        else:
            x = quantize_fp8(q[None, a:a + sq], k[None, c:c + sk], v[None, c:c + sk], **options)
        parts.append(x)
        a, c = a + sq, c + sk

    def per_sequence(d):       # () per tensor or (1, kv_heads) per head -> (1, kv_heads)
        return d.reshape(-1).expand(hkv).reshape(1, hkv) if d.numel() == 1 else d.reshape(1, hkv)
    return FP8Inputs(torch.cat([x.q[0] for x in parts]), torch.cat([x.k[0] for x in parts]),
                     torch.cat([x.v[0].contiguous() for x in parts]),
                     *(torch.cat([per_sequence(getattr(x, n)) for x in parts]).contiguous()
                       for n in ("q_descale", "k_descale", "v_descale")))
