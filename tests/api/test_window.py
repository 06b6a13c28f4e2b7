"""Sliding-window attention (FlashAttention's window_size) on every path that has it: the float64
reference and the FP8 spec against a mask built here from the definition, the Triton kernel
(BF16, FP8, INT8; dense, packed, paged) against them, gfx950's refusal and the generated
Hopper kernels' acceptance (their bounds and mask: tests/ptx/test_ptx_window.py).
Window sizes sit at block edges: 0, 1, the interpreter's 32-key tile (31, 32, 33), the spec's
128-key block (127, 128, 129) and beyond the sequence."""
import dataclasses
import math

import pytest
import torch

from conftest import DEVICE, HAS_GPU, assert_rel, describe_mismatch, rel_err, rounding_error
import zyfa
from zyfa import dispatch
from zyfa.activations import make
from zyfa.spec.reference import attention_fp64, fp8_attention_spec, key_limits, seen_blocks

LEFTS = [0, 1, 31, 32, 33, 127, 128, 129, 1000]


def _mask(Sq, Sk, causal, window):
    """The definition: query i sees keys j with i + o - left <= j <= i + o + right, o = Sk - Sq
    (-1: unbounded; causal: right = 0)."""
    left, right = window
    right = 0 if causal else right
    i = torch.arange(Sq)[:, None] + (Sk - Sq)
    j = torch.arange(Sk)[None, :]
    ok = torch.ones(Sq, Sk, dtype=torch.bool)
    if left >= 0:
        ok &= j >= i - left
    if right >= 0:
        ok &= j <= i + right
    return ok


def _masked_fp64(q, k, v, mask, p_dtype=None):
    """float64 attention under an explicit (Sq, Sk) mask; ``p_dtype``: P and the output rounded
    to it (the same precision done in torch, the baseline of a 16-bit kernel)."""
    g = q.shape[2] // k.shape[2]
    s = torch.einsum("bqhd,bkhd->bhqk", q.double(), k.double().repeat_interleave(g, 2)) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~mask.to(s.device), float("-inf"))
    p = torch.exp(s - s.amax(-1, keepdim=True))
    pv = p if p_dtype is None else p.to(p_dtype).double()
    o = torch.einsum("bhqk,bkhd->bqhd", pv, v.double().repeat_interleave(g, 2)) / p.sum(-1).transpose(1, 2)[..., None]
    return o if p_dtype is None else o.to(p_dtype)


@pytest.mark.parametrize("left", LEFTS)
@pytest.mark.parametrize("causal,right,Sq,Sk", [(True, -1, 150, 150), (True, -1, 70, 200),
                                                 (False, 5, 150, 260), (False, -1, 90, 90)])
def test_reference_and_spec_follow_the_definition(left, causal, right, Sq, Sk):
    window = (left, right)
    q, k, v = make("realistic", 1, Sq, 4, 2, 64, 64, seqlen_k=Sk, seed=left + Sq, device="cpu")
    mask = _mask(Sq, Sk, causal, window)
    first, last = key_limits(Sq, Sk, causal, window)
    assert torch.equal(mask, (torch.arange(Sk)[None] >= first[:, None]) & (torch.arange(Sk)[None] <= last[:, None]))
    ref = attention_fp64(q, k, v, causal=causal, window_size=window)
    assert rel_err(ref, _masked_fp64(q, k, v, mask)) < 1e-12
    # the blockwise FP8 spec, which skips blocks no row sees, against float64 on its own
    # (dequantized) inputs: as close as the spec without a window is on the same rows
    x = zyfa.quantize_fp8(q, k, v)
    deq = x.dequantized()
    spec = fp8_attention_spec(**x.kwargs(), causal=causal, window_size=window)
    base = rel_err(fp8_attention_spec(**x.kwargs(), causal=causal), attention_fp64(*deq, causal=causal))
    assert rel_err(spec, _masked_fp64(*deq, mask)) <= 2 * base + 1e-3


def test_seen_blocks_skip_what_no_row_sees():
    # causal window 0 over the last 70 of 1000 keys: rows see keys 930..999 only
    assert seen_blocks(70, 1000, True, (0, -1), 128) == range(7, 8)
    assert seen_blocks(70, 1000, True, (129, -1), 128) == range(6, 8)
    assert seen_blocks(300, 300, True, (-1, -1), 128) == range(0, 3)
    assert seen_blocks(10, 300, False, (-1, 3), 128) == range(0, 3)


def _windowed_cases():
    return [(left, causal, right, Sq, Sk) for left in LEFTS for causal, right, Sq, Sk in
            [(True, -1, 100, 180), (False, 40, 120, 90)]]


@pytest.mark.parametrize("left,causal,right,Sq,Sk", _windowed_cases())
@pytest.mark.slow
def test_triton_bf16_window_vs_fp64(left, causal, right, Sq, Sk):
    window = (left, right)
    q, k, v = make("realistic", 1, Sq, 4, 2, 64, 64, seqlen_k=Sk, seed=left + 7, dtype=torch.bfloat16, device=DEVICE)
    mask = _mask(Sq, Sk, causal, window)
    ref = _masked_fp64(q, k, v, mask)
    out, lse = zyfa.flash_attn_func(q, k, v, causal=causal, window_size=window, return_lse=True, backend="triton")
    base = rel_err(_masked_fp64(q, k, v, mask, torch.bfloat16), ref)
    assert rel_err(out, ref) <= 2 * base + rounding_error(ref, out.dtype), (rel_err(out, ref), base)
    _, lse_ref = attention_fp64(q, k, v, causal=causal, window_size=window, return_lse=True)
    assert (lse.double() - lse_ref).abs().max() < 1e-3


def _check_vs_spec(out, spec, ref, what, lse, lse_spec):
    """CPU: the interpreter's kernel computes the spec's P bits but at float32 rounding ties of t
    (y = t - r rounded twice on both sides, summed in float32 against the spec's float64), so
    its output is the spec's rounded to bf16 in all but a few elements (at most 0.5%, measured
    up to 0.21% with windows), which move the whole within 5% of the spec's own distance from
    float64; a wrong mask moves it by far more. LSE within float32 rounding but in the rows of
    such a tie (at most 0.5%), there within ln(9/8): one E4M3 step of one P in the row's sum.
    GPU: within 2e-2 (tensor-core accumulation moves P bits)."""
    if HAS_GPU:
        assert_rel(out, spec, 2e-2, what)
        return
    want = spec.to(out.dtype).double()
    off = (out.double() - want).abs() > 0
    assert off.float().mean() <= 5e-3, f"{what}: " + describe_mismatch(out, want)
    assert rel_err(out, want) <= 0.05 * rel_err(spec, ref), f"{what}: " + describe_mismatch(out, want)
    tol = 8 * 2.0 ** -24 * lse_spec.abs().max().item()
    d = (lse.double() - lse_spec).abs()
    assert (d > tol).float().mean() <= 5e-3 and d.max() <= math.log(9 / 8), \
        f"{what} LSE: " + describe_mismatch(lse, lse_spec, tol)


def _spec(x, **kw):
    return fp8_attention_spec(**x.kwargs(), block_n=32 if not HAS_GPU else 128, fused_fma=HAS_GPU, return_lse=True, **kw)


@pytest.mark.parametrize("quant", ["fp8", "int8"])
@pytest.mark.parametrize("left,causal,right,Sq,Sk", _windowed_cases())
@pytest.mark.slow
def test_triton_fp8_and_int8_window_vs_spec(quant, left, causal, right, Sq, Sk):
    window = (left, right)
    # Gaussian inputs: realistic ones' outliers put some t at a float32 rounding tie, where the
    # interpreter and the spec part ways with a window or without
    q, k, v = make("gaussian", 1, Sq, 4, 2, 64, 64, seqlen_k=Sk, seed=left + 11, device=DEVICE)
    x = zyfa.quantize_fp8(q, k, v) if quant == "fp8" else zyfa.quantize_int8_qk(q, k, v)
    out, lse = zyfa.flash_attn_func(**x.kwargs(), causal=causal, window_size=window, return_lse=True,
                                    backend="triton")
    spec, lse_spec = _spec(x, causal=causal, window_size=window)
    ref = _masked_fp64(*x.dequantized(), _mask(Sq, Sk, causal, window))
    _check_vs_spec(out, spec, ref, f"{quant} window {window}", lse, lse_spec)
    assert rel_err(out, ref) <= 1.1 * rel_err(spec, ref) + rounding_error(ref, out.dtype)


@pytest.mark.skipif(HAS_GPU, reason="the interpreter's pinned 32x32 tile sets which blocks a tile reads")
def test_blocks_outside_the_window_are_never_read():
    """NaN in V's first 64 keys: a block the kernel loads passes it on as 0 * NaN even where it
    masks every key, so rows whose tiles begin past key 64 + left come out finite only if the
    kernel never reads those blocks; the rows that see the keys are NaN, as they must be.
    BF16: the interpreter decodes E4M3's NaN code as a number, and the block bounds are the
    same code for every mode."""
    Sq = Sk = 160
    left = 33
    q, k, v = make("realistic", 1, Sq, 2, 1, 64, 64, seed=3, dtype=torch.bfloat16, device=DEVICE)
    v = v.clone()
    v[:, :64] = float("nan")
    out = zyfa.flash_attn_func(q, k, v, causal=True, window_size=(left, 0), backend="triton")
    sees = torch.arange(Sq) - left < 64                 # rows whose window reaches a poisoned key
    assert out[0, sees].isnan().all(-1).all(-1).all()
    clean_tiles = torch.arange(Sq) >= 128               # tiles 128..159: first key 95, block 64..95 onward
    assert torch.isfinite(out[0, clean_tiles]).all()


def _cu(lens):
    return torch.tensor([0] + list(torch.tensor(lens).cumsum(0).tolist()), dtype=torch.int32, device=DEVICE)


@pytest.mark.parametrize("left", [0, 33, 128, 1000])
@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
@pytest.mark.parametrize("paged", [False, True], ids=["packed", "paged"])
@pytest.mark.slow
def test_varlen_window_and_chunked_prefill(left, fp8, paged):
    """Packed and paged batches with a window, each sequence a chunk of queries over a longer
    prefix (chunked prefill): one call equals a flash_attn_func call a sequence."""
    lens_q, lens_k = [30, 1, 70], [90, 40, 70]
    g = torch.Generator().manual_seed(left)
    q = torch.randn(sum(lens_q), 4, 64, generator=g).to(DEVICE, torch.bfloat16)
    k = torch.randn(sum(lens_k), 2, 64, generator=g).to(DEVICE, torch.bfloat16)
    v = torch.randn(sum(lens_k), 2, 64, generator=g).to(DEVICE, torch.bfloat16)
    ds = {}
    if fp8:
        x = zyfa.quantize_fp8_varlen(q, k, v, _cu(lens_q), _cu(lens_k))
        q, k, v = x.q, x.k, x.v
        ds = dict(q_descale=x.q_descale, k_descale=x.k_descale, v_descale=x.v_descale)
    kv = dict(k=k, v=v, cu_seqlens_k=_cu(lens_k))
    if paged:
        kp, vp, table, used = zyfa.varlen.paged_kv_cache(k, v, _cu(lens_k), 32)
        kv = dict(k=kp, v=vp, block_table=table, seqused_k=used)
    out, lse = zyfa.flash_attn_varlen_func(q, cu_seqlens_q=_cu(lens_q), causal=True, window_size=(left, 0),
                                           return_softmax_lse=True, backend="triton", **kv, **ds)
    a = c = 0
    for i, (sq, sk) in enumerate(zip(lens_q, lens_k)):
        one = {n: d[i:i + 1] for n, d in ds.items()}
        o, l1 = zyfa.flash_attn_func(q[None, a:a + sq], k[None, c:c + sk], v[None, c:c + sk], causal=True,
                                     window_size=(left, 0), return_lse=True, backend="triton", **one)
        assert torch.equal(out[a:a + sq], o[0]), (i, rel_err(out[a:a + sq], o[0]))
        assert torch.equal(lse[:, a:a + sq], l1[0])
        if not fp8:
            ref = _masked_fp64(q[None, a:a + sq], k[None, c:c + sk], v[None, c:c + sk], _mask(sq, sk, True, (left, 0)))
            assert rel_err(o, ref) < 2e-2
        a, c = a + sq, c + sk


def test_gfx950_refuses_a_window_with_a_reason_and_ptx_takes_it():
    p = dispatch.Problem(device=torch.device("cuda"), arch="sm90", is_fp8=True, head_dims=(128, 128), causal=True,
                         seqlen_q=64, seqlen_k=64, p_rule="exact", ref_rule="block", window=(4096, -1))
    ok, why = dispatch.by_name("gfx950").can_implement(p)
    assert not ok and "sliding window" in why and "(4096, -1)" in why
    # the generated Hopper kernels take it (here only cuda-python may be missing)
    for problem in (p, dataclasses.replace(p, is_fp8=False), dataclasses.replace(p, packed=True)):
        ok, why = dispatch.by_name("ptx").can_implement(problem)
        assert ok or ("window" not in why and "cuda-python" in why), why
        if ok:
            assert "sliding window (4096, -1)" in why
    q = torch.randn(1, 64, 2, 64, dtype=torch.bfloat16, device=DEVICE)
    text = zyfa.explain(q, q, q, causal=True, window_size=(8, 0))
    assert "the generated PTX kernels have no sliding window" not in text


@pytest.mark.parametrize("window,causal,word", [
    ((-2, 0), True, "left must be >= 0"), ((3, -5), False, "right must be >= 0"),
    ((3, 2), True, "causal=True fixes window_size's right at 0"), ((1, 2, 3), False, "pair of ints"),
    ("ab", False, "pair of ints"), ((1.5, 0), False, "pair of ints"), ((4, 0), False, r"seqlen_q <= seqlen_k \+ 0")])
def test_bad_windows_name_the_argument(window, causal, word):
    q = torch.randn(1, 40, 2, 64, dtype=torch.bfloat16, device=DEVICE)
    k = torch.randn(1, 30, 2, 64, dtype=torch.bfloat16, device=DEVICE)
    with pytest.raises((ValueError, TypeError), match=word):
        zyfa.flash_attn_func(q, k if window == (4, 0) else q, k if window == (4, 0) else q, causal=causal,
                             window_size=window, backend="reference")


def test_minus_one_zero_is_the_causal_mask():
    q, k, v = make("realistic", 1, 50, 2, 1, 64, 64, seed=4, dtype=torch.bfloat16, device=DEVICE)
    a = zyfa.flash_attn_func(q, k, v, window_size=(-1, 0), backend="reference")
    assert torch.equal(a, zyfa.flash_attn_func(q, k, v, causal=True, backend="reference"))
    assert not torch.equal(a, zyfa.flash_attn_func(q, k, v, backend="reference"))
