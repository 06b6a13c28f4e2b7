"""Seeded synthetic LLM-like attention inputs ("realistic activations").

Gaussian inputs mislead FP8 studies: real Q/K have a per-channel scale spread
with a few outlier channels, a shared offset between Q and K, rotary position
embedding, and an attention sink at position 0 that nearly every query hits;
V has a few large channels. ``realistic`` builds all of that from one seed.
"""
from __future__ import annotations

import math

import torch


def _rope(x: torch.Tensor, rope_dims: int, base: float = 10000.0) -> torch.Tensor:
    """Apply rotary embedding (half-split convention) to the last ``rope_dims`` channels."""
    if rope_dims == 0:
        return x
    S = x.shape[1]
    half = rope_dims // 2
    inv = base ** (-torch.arange(half, dtype=torch.float64) / half)
    ang = torch.arange(S, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    head, tail = x[..., : x.shape[-1] - rope_dims], x[..., x.shape[-1] - rope_dims:]
    a, b = tail[..., :half], tail[..., half:]
    rot = torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    return torch.cat([head, rot], dim=-1)


def gaussian(batch, seqlen, heads, kv_heads, head_dim, head_dim_v=None, seqlen_k=None,
             seed=0, dtype=torch.bfloat16, device="cpu"):
    """Standard normal q, k, v in FlashAttention layout."""
    g = torch.Generator().manual_seed(seed)
    Sk = seqlen_k or seqlen
    dv = head_dim_v or head_dim
    q = torch.randn(batch, seqlen, heads, head_dim, generator=g)
    k = torch.randn(batch, Sk, kv_heads, head_dim, generator=g)
    v = torch.randn(batch, Sk, kv_heads, dv, generator=g)
    return tuple(x.to(device=device, dtype=dtype) for x in (q, k, v))


def realistic(batch, seqlen, heads, kv_heads, head_dim, head_dim_v=None, seqlen_k=None,
              seed=0, dtype=torch.bfloat16, device="cpu", rope_dims=None,
              n_outliers=4, sink_strength=2.0):
    """LLM-like q, k, v: channel spread with outliers, shared offset, RoPE, sink, large V channels.

    MLA shapes (head_dim 192, head_dim_v 128) rotate only the last 64 channels, as
    DeepSeek-V2 does; other head dims rotate all channels unless ``rope_dims`` says.
    Built in float64 on the CPU from ``seed`` and cast at the end.
    """
    g = torch.Generator().manual_seed(seed)
    Sk = seqlen_k or seqlen
    dv = head_dim_v or head_dim
    if rope_dims is None:
        rope_dims = 64 if head_dim == 192 else head_dim

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    # per-(kv head, channel) scale: log-normal spread plus a few outlier channels
    chan = torch.exp(0.5 * randn(kv_heads, head_dim))
    for h in range(kv_heads):
        idx = torch.randperm(head_dim, generator=g)[:n_outliers]
        chan[h, idx] *= 2.5
    offset = 0.5 * randn(kv_heads, head_dim)          # shared by q and k: the "massive" bias
    group = heads // kv_heads
    chan_q = chan.repeat_interleave(group, 0)
    offset_q = offset.repeat_interleave(group, 0)

    q = randn(batch, seqlen, heads, head_dim) * chan_q + offset_q
    k = randn(batch, Sk, kv_heads, head_dim) * chan + 0.5 * offset
    # the sink: key 0 points along the mean query direction, so most queries attend to it
    k[:, 0] = sink_strength * offset / offset.norm(dim=-1, keepdim=True) * math.sqrt(head_dim)
    # normalise so scores q.k / sqrt(d) have a spread typical of trained models (std ~ 1.3)
    q = q / q.pow(2).mean().sqrt()
    k = k / k.pow(2).mean().sqrt() * 0.7
    q, k = _rope(q, rope_dims), _rope(k, rope_dims)

    vchan = torch.exp(0.3 * randn(kv_heads, dv))
    for h in range(kv_heads):
        idx = torch.randperm(dv, generator=g)[:n_outliers]
        vchan[h, idx] *= 4.0
    v = randn(batch, Sk, kv_heads, dv) * vchan
    v[:, 0] *= 0.1                                    # sinks carry little value
    return tuple(x.to(device=device, dtype=dtype) for x in (q, k, v))


def make(kind: str, *args, **kwargs):
    """``kind`` in ("gaussian", "realistic")."""
    if kind == "gaussian":
        kwargs.pop("rope_dims", None)
        return gaussian(*args, **kwargs)
    if kind == "realistic":
        return realistic(*args, **kwargs)
    raise ValueError(f"input kind must be 'gaussian' or 'realistic', got {kind!r}")


def capture(model, input_ids, layers=None, path=None):
    """Record a transformers model's post-RoPE Q, K, V (zyfa.capture.capture)."""
    from .capture import capture as _capture
    return _capture(model, input_ids, layers=layers, path=path)


def load_capture(path):
    """Read a capture file (zyfa.capture.load_capture)."""
    from .capture import load_capture as _load
    return _load(path)
