"""Input checks for flash_attn_func: every bad input gets a ValueError/TypeError that
names the argument, what it got and what is allowed. Nothing is silently reinterpreted."""
from __future__ import annotations

import math
import numbers
import operator

import torch

from .spec.descales import check_descale, key_blocks
from .spec.rules import DEFAULT_P_RULE, DEFAULT_REF_RULE, check_rules
from .spec.shapes import HEAD_DIMS

HALF_DTYPES = (torch.bfloat16, torch.float16)
FP8_DTYPE = torch.float8_e4m3fn
INT8_DTYPE = torch.int8            # q and k in the INT8 Q.K^T mode (v E4M3): zyfa.quantize_int8_qk
_OTHER_FP8 = tuple(getattr(torch, n) for n in ("float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
                   if hasattr(torch, n))


def _check_tensor(name: str, x) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 4:
        raise ValueError(f"{name} must be 4-D (batch, seqlen, heads, head_dim), got shape {tuple(x.shape)}")
    if x.numel() == 0:
        raise ValueError(f"{name} is empty (shape {tuple(x.shape)}); every dimension must be >= 1")
    if x.dtype in _OTHER_FP8:
        raise TypeError(f"{name} has dtype {x.dtype}; the only FP8 format supported is "
                        "torch.float8_e4m3fn (OCP E4M3, as Hopper and CDNA4 use)")
    if x.dtype not in HALF_DTYPES + (FP8_DTYPE, INT8_DTYPE):
        raise TypeError(f"{name} has dtype {x.dtype}; allowed: torch.bfloat16, torch.float16, "
                        "torch.float8_e4m3fn (and torch.int8 q, k with E4M3 v: zyfa.quantize_int8_qk)")


def validate(q, k, v, causal, softmax_scale, q_descale, k_descale, v_descale) -> bool:
    """Check all arguments; returns True for FP8 inputs (E4M3 v: q and k E4M3 or int8)."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        _check_tensor(name, x)
    int8_qk = q.dtype == INT8_DTYPE or k.dtype == INT8_DTYPE
    if int8_qk and not (q.dtype == k.dtype == INT8_DTYPE and v.dtype == FP8_DTYPE):
        raise TypeError(f"INT8 Q.K^T takes int8 q and k with float8_e4m3fn v (zyfa.quantize_int8_qk), got "
                        f"q {q.dtype}, k {k.dtype}, v {v.dtype}")
    if not int8_qk and len({q.dtype, k.dtype, v.dtype}) != 1:
        raise TypeError(f"q, k, v must share one dtype, got q {q.dtype}, k {k.dtype}, v {v.dtype}")
    devices = {q.device, k.device, v.device}
    if len(devices) != 1:
        raise ValueError(f"q, k, v must be on one device, got q {q.device}, k {k.device}, v {v.device}")
    B, Sq, Hq, D = q.shape
    Bk, Sk, Hkv, Dk = k.shape
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(f"k and v must agree in (batch, seqlen_k, kv_heads): k {tuple(k.shape)}, v {tuple(v.shape)}")
    if Bk != B:
        raise ValueError(f"q and k must have the same batch size, got q {B}, k {Bk}")
    if Dk != D:
        raise ValueError(f"q and k must have the same head_dim, got q {D}, k {Dk}")
    if (D, v.shape[-1]) not in HEAD_DIMS:
        raise ValueError(f"head dims (qk {D}, v {v.shape[-1]}) are not supported; allowed (qk, v): "
                         f"{', '.join(str(p) for p in HEAD_DIMS)}")
    if Hq % Hkv:
        raise ValueError(f"heads ({Hq}) must be divisible by kv_heads ({Hkv}) for GQA/MQA")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    if causal and Sq > Sk:
        raise ValueError(f"causal attention needs seqlen_q <= seqlen_k (bottom-right alignment), "
                         f"got seqlen_q {Sq} > seqlen_k {Sk}")
    softmax_scale_value(softmax_scale)
    for name, x in (("q", q), ("k", k)):
        if x.stride(-1) != 1:
            raise ValueError(f"{name} must have a contiguous last dimension, got strides {x.stride()}")
    if v.stride(-1) != 1 and v.stride(1) != 1:
        raise ValueError(f"v must have a contiguous last dimension (or, for FP8, contiguous seqlen as "
                         f"zyfa.quantize_fp8 writes it), got strides {v.stride()}")
    is_fp8 = v.dtype == FP8_DTYPE
    descales = (("q_descale", q_descale, (B, Hq, Sq)), ("k_descale", k_descale, (B, Hkv, Sk)),
                ("v_descale", v_descale, (B, Hkv, v.shape[-1])))
    if not is_fp8:
        given = [n for n, d, _ in descales if d is not None]
        if given:
            raise ValueError(f"{', '.join(given)} given for {q.dtype} inputs; descales apply to FP8 inputs only")
        return False
    missing = [n for n, d, _ in descales if d is None]
    if missing:
        raise ValueError(f"FP8 inputs need q_descale, k_descale and v_descale; missing {', '.join(missing)} "
                         "(zyfa.quantize_fp8 returns all three; pass torch.ones(()) for unscaled data)")
    for name, d, fine in descales:
        check_descale(name, d, B, Hkv, fine, (B, Hkv, key_blocks(Sk)) if name == "k_descale" else None)
        if d.device != q.device:
            raise ValueError(f"{name} is on {d.device} but q is on {q.device}")
        # values are checked where that costs no device synchronization (CPU tensors, eager); on a
        # GPU a NaN or Inf descale gives NaN outputs for the heads it scales. With int8 q and k,
        # per-token descales may be NaN: that is how quantize_int8_qk carries a non-finite q or k
        # element (int8 has no NaN), which then reaches the rows that see it and only those
        carries_nan = int8_qk and d.dim() == 3
        if d.device.type == "cpu" and not torch.compiler.is_compiling() and not carries_nan \
                and not bool(torch.isfinite(d).all()):
            raise ValueError(f"{name} holds NaN or Inf values; descales must be finite")
    return True


def softmax_scale_value(softmax_scale) -> float | None:
    """softmax_scale as a Python float (None stays None): any real scalar -- int, float, a NumPy
    scalar, a 0-d real CPU tensor -- positive and finite."""
    value = softmax_scale
    if isinstance(value, torch.Tensor):
        if value.dim() != 0 or value.dtype == torch.bool or value.is_complex():
            raise TypeError(f"softmax_scale as a tensor must be a 0-d real tensor, got shape {tuple(value.shape)} "
                            f"dtype {value.dtype}")
        if value.device.type != "cpu":
            raise ValueError(f"softmax_scale is a tensor on {value.device}; pass a Python number or a CPU tensor "
                             "(reading a GPU value would synchronize the device)")
        value = value.item()
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"softmax_scale must be a real number (int, float, NumPy scalar, 0-d CPU tensor) or None, "
                        f"got {type(softmax_scale).__name__}")
    value = float(value)
    if not 0 < value < math.inf:
        raise ValueError(f"softmax_scale must be a positive finite number or None, got {softmax_scale!r}")
    return value


def fp8_rules(is_fp8: bool, p_rule, ref_rule, dtype) -> tuple[str, str]:
    """The FP8 rules (defaults for None); BF16/FP16 inputs take none: naming one is an error."""
    if not is_fp8:
        given = [n for n, r in (("p_rule", p_rule), ("ref_rule", ref_rule)) if r is not None]
        if given:
            raise ValueError(f"{' and '.join(given)} apply to FP8 inputs only; got {dtype} inputs")
    p_rule = DEFAULT_P_RULE if p_rule is None else p_rule
    ref_rule = DEFAULT_REF_RULE if ref_rule is None else ref_rule
    check_rules(p_rule, ref_rule)
    return p_rule, ref_rule


def keys_past_diagonal(causal: bool, window: tuple[int, int]) -> int:
    """The most keys past its diagonal a query row sees under check_window's (causal, window):
    0 causal, the window's right bound, or -1 (unbounded: no row can be left without a key)."""
    return 0 if causal else window[1]


def check_window(window_size, causal: bool, seqlen_q: int | None = None, seqlen_k: int | None = None):
    """(causal, (left, right)) from FlashAttention's window_size: query i sees keys
    i + o - left <= j <= i + o + right (o = seqlen_k - seqlen_q; -1: unbounded; None: (-1, -1)).
    causal fixes right at 0, and (-1, 0) is the causal mask itself, returned as causal with no
    window. With a right bound every row must see a key: seqlen_q <= seqlen_k + right."""
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    if window_size is None:
        window_size = (-1, -1)
    try:
        left, right = (operator.index(w) for w in window_size)
    except (TypeError, ValueError):
        raise TypeError(f"window_size must be a pair of ints (left, right), -1 for unbounded, got {window_size!r}") from None
    for name, w in (("left", left), ("right", right)):
        if w < -1:
            raise ValueError(f"window_size's {name} must be >= 0, or -1 for unbounded, got {window_size!r}")
    if causal and right > 0:
        raise ValueError(f"causal=True fixes window_size's right at 0 (no key after the diagonal), got {window_size!r}")
    if causal or (left, right) == (-1, 0):
        causal, right = True, -1
    bound = keys_past_diagonal(causal, (left, right))
    if bound >= 0 and seqlen_q is not None and seqlen_q > seqlen_k + bound:
        what = "causal attention" if causal else f"window_size right {bound}"
        raise ValueError(f"{what} needs seqlen_q <= seqlen_k + {bound} (bottom-right alignment: every query "
                         f"row must see a key), got seqlen_q {seqlen_q}, seqlen_k {seqlen_k}")
    return causal, (left, right)


def refuse_unsupported(dropout_p=0.0, softcap=0.0, alibi_slopes=None, qv=None, attention_chunk=0,
                       seqused_q=None) -> None:
    """FlashAttention options zyfa does not implement, each allowed only at its neutral value."""
    if not isinstance(dropout_p, numbers.Real) or dropout_p != 0:
        raise NotImplementedError(f"dropout_p={dropout_p!r}: zyfa is inference-only, dropout_p must be 0.0")
    if not isinstance(softcap, numbers.Real) or softcap != 0:
        raise NotImplementedError(f"softcap={softcap!r}: zyfa has no soft-capping, softcap must be 0.0")
    for name, x in (("alibi_slopes", alibi_slopes), ("qv", qv), ("seqused_q", seqused_q)):
        if x is not None:
            raise NotImplementedError(f"{name} is not implemented in zyfa; it must be None")
    if attention_chunk not in (0, None):
        raise NotImplementedError(f"attention_chunk={attention_chunk!r} is not implemented in zyfa; it must be 0")


def check_out(out, shape: tuple, dtype: torch.dtype, device) -> None:
    """``out=``: a tensor the result is written into."""
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor or None, got {type(out).__name__}")
    if tuple(out.shape) != tuple(shape) or out.dtype != dtype or out.device != device:
        raise ValueError(f"out must have shape {tuple(shape)}, dtype {dtype} on {device}, got shape "
                         f"{tuple(out.shape)}, dtype {out.dtype} on {out.device}")


def check_pages_in_pool(name: str, table: torch.Tensor, counts: list[int], num_pages: int) -> None:
    """The first counts[i] pages of row i of ``table`` (a host int32 block table) name pages of
    a pool of num_pages, or a ValueError naming the first that does not; the rest of a row is
    not read. Tensor checks, not a Python loop over the pages: a serving batch names thousands."""
    in_use = torch.arange(table.shape[1])[None, :] < torch.tensor(counts, dtype=torch.long)[:, None]
    bad = (in_use & ((table < 0) | (table >= num_pages))).nonzero()
    if len(bad):
        i, j = bad[0].tolist()
        raise ValueError(f"{name} row {i} uses page {int(table[i, j])}, outside [0, num_pages={num_pages})")


def check_index_tensor(name: str, x, dims: int) -> torch.Tensor:
    """An int32 index tensor (cu_seqlens, a block / page table, sequence lengths) of ``dims``
    dimensions, or a TypeError / ValueError naming it."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be an int32 torch.Tensor, got {type(x).__name__}")
    if x.dtype != torch.int32:
        raise TypeError(f"{name} must have dtype torch.int32, got {x.dtype}")
    if x.dim() != dims:
        raise ValueError(f"{name} must be {dims}-D, got shape {tuple(x.shape)}")
    return x
