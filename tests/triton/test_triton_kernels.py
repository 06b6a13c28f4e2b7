"""The Triton kernels against float64 and the bit-level spec.

On the CPU they run in Triton's interpreter at small shapes with the pinned tiles
(32x32), where the FP8 kernel equals the spec bit for bit in its BF16 output (the
interpreter rounds a*b+c twice, so the spec runs with fused_fma=False). On a GPU the
same tests run the compiled kernels; there the FP8 tensor cores' accumulation changes
t slightly, so agreement with the spec is judged against the spec's own distance from
float64.
"""
import math

import pytest
import torch

from conftest import DEVICE, HAS_GPU, assert_rel, describe_mismatch, rel_err, rounding_error
import zyfa
from zyfa.activations import make
from zyfa.spec.constants import LOG2E
from zyfa.spec.reference import attention_fp64, fp8_attention_spec

SHAPES = [  # B, Sq, Sk, Hq, Hkv, D, Dv, causal
    (1, 70, 70, 2, 1, 128, 128, True),      # seqlen not a multiple of the block, MQA
    (2, 33, 97, 4, 2, 64, 64, True),        # seqlen_q < seqlen_k (bottom-right)
    (1, 1, 45, 2, 2, 64, 64, True),         # one query row
    (1, 1, 1, 2, 1, 128, 128, True),        # one token
    (1, 48, 64, 2, 1, 192, 128, True),      # MLA head dims
    (1, 40, 50, 2, 1, 256, 256, False),     # non-causal, head dim 256
]


def _scores64(q, k, causal, softmax_scale=None, dtype=torch.float64):
    """Scaled scores (B, H, Sq, Sk) in ``dtype``, bottom-right causal mask as -inf."""
    Sq, Sk, g = q.shape[1], k.shape[1], q.shape[2] // k.shape[2]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    s = torch.einsum("bqhd,bkhd->bhqk", q.to(dtype), k.to(dtype).repeat_interleave(g, 2)) * scale
    if causal:
        s = s.masked_fill(torch.arange(Sk, device=q.device)[None] >
                          torch.arange(Sq, device=q.device)[:, None] + Sk - Sq, float("-inf"))
    return s


def _half_baseline(q, k, v, causal, softmax_scale=None):
    """The same precision done in torch, in the inputs' own dtype: float64 attention with P
    and the output rounded to q.dtype (FP16 against FP16, BF16 against BF16)."""
    g = q.shape[2] // k.shape[2]
    s = _scores64(q, k, causal, softmax_scale)
    p = torch.exp(s - s.amax(-1, keepdim=True))
    o = torch.einsum("bhqk,bkhd->bqhd", p.to(q.dtype).double(), v.double().repeat_interleave(g, 2))
    return (o / p.sum(-1).transpose(1, 2)[..., None]).to(q.dtype)


def _lse_bound(q, k, causal, lse_ref, softmax_scale=None):
    """LSE tolerance from float32: 4x the error of torch's float32 logsumexp on the same
    inputs, plus a floor of a few float32 ulps of the LSE."""
    lse32 = torch.logsumexp(_scores64(q, k, causal, softmax_scale, torch.float32), -1)
    return 4 * (lse32.double() - lse_ref).abs().max().item() + 4 * 2.0 ** -24 * lse_ref.abs().max().item()


def _check_half(q, k, v, causal, softmax_scale=None, what=""):
    out, lse = zyfa.flash_attn_func(q, k, v, causal=causal, softmax_scale=softmax_scale, return_lse=True,
                                    backend="triton")
    ref, lse_ref = attention_fp64(q, k, v, causal=causal, softmax_scale=softmax_scale, return_lse=True)
    base = rel_err(_half_baseline(q, k, v, causal, softmax_scale), ref)
    # FP16's P (11 bits) keeps the kernel at its baseline; BF16's accumulation order adds up to ~60%
    assert_rel(out, ref, (1.25 if q.dtype == torch.float16 else 1.75) * base + 1e-5, f"{what} {q.dtype} kernel")
    bound = _lse_bound(q, k, causal, lse_ref, softmax_scale)
    assert (lse.double() - lse_ref).abs().max() <= bound, f"{what} LSE: " + describe_mismatch(lse, lse_ref, bound)
    return out, lse


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_kernel_vs_fp64(shape, dtype):
    B, Sq, Sk, Hq, Hkv, D, Dv, causal = shape
    q, k, v = make("realistic", B, Sq, Hq, Hkv, D, Dv, seqlen_k=Sk, seed=Sq * 7 + Sk, dtype=dtype, device=DEVICE)
    out, lse = _check_half(q, k, v, causal)
    assert out.dtype == (torch.float16 if dtype == torch.float16 else torch.bfloat16)
    assert out.shape == (B, Sq, Hq, Dv) and lse.shape == (B, Hq, Sq) and lse.dtype == torch.float32


def _fp8_case(shape, kind="realistic", granularity="head", seed=None):
    B, Sq, Sk, Hq, Hkv, D, Dv, causal = shape
    q, k, v = make(kind, B, Sq, Hq, Hkv, D, Dv, seqlen_k=Sk, seed=Sq + 3 * Sk if seed is None else seed, device=DEVICE)
    x = zyfa.quantize_fp8(q, k, v, granularity=granularity, block_size=16)
    ref = attention_fp64(*x.dequantized(), causal=causal)
    return x, ref, causal


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("p_rule", ["lean_cubic", "lean", "exact", "lean_cubic_f16"])
@pytest.mark.slow
def test_fp8_kernel_vs_spec(shape, p_rule):
    x, ref, causal = _fp8_case(shape)
    out, lse = zyfa.flash_attn_func(**x.kwargs(), causal=causal, p_rule=p_rule, return_lse=True, backend="triton")
    spec, lse_spec = fp8_attention_spec(**x.kwargs(), causal=causal, p_rule=p_rule, return_lse=True,
                                        block_n=32 if not HAS_GPU else 128, fused_fma=HAS_GPU)
    spec_err = rel_err(spec, ref)
    if not HAS_GPU:
        _check_fp8_vs_spec(out, spec, p_rule, lse, lse_spec)
    else:
        # P bits flip where wgmma's accumulation moves t across a rounding boundary
        assert rel_err(out, spec) <= max(1.0 * spec_err, 2e-3), (p_rule, rel_err(out, spec), spec_err)
        assert (lse.double() - lse_spec).abs().max() < 0.05
    assert rel_err(out, ref) <= 1.1 * spec_err + rounding_error(ref, out.dtype), (p_rule, rel_err(out, ref), spec_err)


@pytest.mark.skipif(not HAS_GPU or torch.version.hip is not None, reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("shape", SHAPES + [(2, 300, 1000, 4, 4, 128, 128, True), (1, 2048, 2048, 8, 2, 128, 128, True)])
def test_exact_rule_hardware_rounding_equals_integer_rounding(shape):
    """The GPU's E4M3 conversion (the default where it exists) and the integer rounding the
    interpreter runs give the same P codes: the same outputs and LSE bit for bit."""
    from zyfa.triton_kernels.launch import hardware_rounding, triton_attention
    if not hardware_rounding(torch.device(DEVICE)):
        pytest.skip("the GPU has no E4M3 conversion (sm_89+)")
    x, _, causal = _fp8_case(shape)
    a, lse_a = triton_attention(**x.kwargs(), causal=causal, p_rule="exact", hw_round=False)
    b, lse_b = triton_attention(**x.kwargs(), causal=causal, p_rule="exact", hw_round=True)
    assert torch.equal(a.view(torch.int16), b.view(torch.int16)) and torch.equal(lse_a, lse_b)


def test_negative_descale_flips_q():
    """The kernel takes the row max on S, which needs the factor c > 0: a negative q descale
    flips Q's signs in registers instead (softmax_scale must be positive). The spec bit for
    bit (CPU) or within its own distance from float64 (GPU)."""
    x, _, causal = _fp8_case((1, 70, 70, 2, 1, 128, 128, True))
    kw = dict(x.kwargs(), q_descale=-x.q_descale)
    out = zyfa.flash_attn_func(**kw, causal=causal, backend="triton")
    spec = fp8_attention_spec(**kw, causal=causal, block_n=32 if not HAS_GPU else 128, fused_fma=HAS_GPU)
    q, k, v = x.dequantized()
    ref = attention_fp64(-q, k, v, causal=causal)
    if not HAS_GPU:
        _check_fp8_vs_spec(out, spec, "negative q descale")
    assert rel_err(out, ref) <= 1.1 * rel_err(spec, ref) + rounding_error(ref, out.dtype), (rel_err(out, ref), rel_err(spec, ref))


@pytest.mark.parametrize("shape", [(2, 70, 70, 2, 1, 128, 128, True), (1, 48, 100, 2, 1, 192, 128, True),
                                   (1, 33, 97, 4, 2, 64, 64, False)])
@pytest.mark.slow
def test_wgmma_key_order_changes_only_summation_order(shape):
    """Keys reordered within groups of 16 in P and V^T alike (Sk padded to a multiple of 16)
    give the same LSE bit for bit and outputs within float32 summation-order noise."""
    from zyfa.triton_kernels.launch import triton_attention
    x, ref, causal = _fp8_case(shape)
    a, lse_a = triton_attention(**x.kwargs(), causal=causal, permute_keys=False)
    b, lse_b = triton_attention(**x.kwargs(), causal=causal, permute_keys=True)
    assert torch.equal(lse_a, lse_b)
    assert_rel(b, a, 2e-3, "reordered keys")
    assert abs(rel_err(b, ref) - rel_err(a, ref)) < 1e-3


def _check_fp8_vs_spec(out, spec, what, lse=None, lse_spec=None):
    """CPU (interpreter, 32-key blocks, FMA rounded twice as the spec is told): the same P bits,
    so the kernel's output is the spec's rounded to the output dtype except where the float32
    sum (the spec sums in float64) sits at a bf16 rounding tie: at most 0.1% of the elements,
    by one bf16 step; the LSE within float32 rounding of the spec's. GPU: within 2e-2
    (tensor-core accumulation moves P bits)."""
    if not HAS_GPU:
        want = spec.to(out.dtype)
        diff = (out.double() - want.double()).abs()
        ulp = want.double().abs().clamp(min=2.0 ** -126) * 2.0 ** -7    # one bf16 step at most
        off = diff > 0
        assert off.float().mean() <= 1e-3 and (diff <= ulp).all(), f"{what}: " + describe_mismatch(out, want)
        if lse is not None:
            tol = 8 * 2.0 ** -24 * lse_spec.abs().max().item()
            assert (lse.double() - lse_spec).abs().max() <= tol, f"{what} LSE: " + describe_mismatch(lse, lse_spec, tol)
    else:
        assert_rel(out, spec, 2e-2, what)


def _spec(x, **kw):
    return fp8_attention_spec(**x.kwargs(), block_n=32 if not HAS_GPU else 128, fused_fma=HAS_GPU, return_lse=True, **kw)


@pytest.mark.parametrize("kind", ["bf16", "fp16", "fp8"])
@pytest.mark.slow
def test_causal_every_residue(kind):
    """Causal block bounds at every residue of seqlen_k - seqlen_q modulo the 32-key block
    (two query tiles each): an off-by-one in the band's start or end shows at one residue only."""
    for d in range(32):
        shape = (1, 40, 40 + d, 1, 1, 64, 64, True)
        if kind == "fp8":
            x, _, _ = _fp8_case(shape, seed=d)
            out, lse = zyfa.flash_attn_func(**x.kwargs(), causal=True, return_lse=True, backend="triton")
            spec, lse_spec = _spec(x, causal=True)
            _check_fp8_vs_spec(out, spec, f"seqlen_k - seqlen_q = {d}", lse, lse_spec)
        else:
            dtype = torch.bfloat16 if kind == "bf16" else torch.float16
            q, k, v = make("realistic", *shape[:2], *shape[3:7], seqlen_k=shape[2], seed=d, dtype=dtype, device=DEVICE)
            _check_half(q, k, v, True, what=f"seqlen_k - seqlen_q = {d}")


@pytest.mark.parametrize("shape", [(1, 40, 77, 4, 2, 64, 64, True), (1, 33, 50, 2, 1, 128, 128, False)])
@pytest.mark.slow
def test_softmax_scale(shape):
    """A non-default softmax_scale on every dtype (float64 and the spec take it too)."""
    B, Sq, Sk, Hq, Hkv, D, Dv, causal = shape
    for dtype in (torch.bfloat16, torch.float16):
        q, k, v = make("realistic", B, Sq, Hq, Hkv, D, Dv, seqlen_k=Sk, seed=11, dtype=dtype, device=DEVICE)
        _check_half(q, k, v, causal, softmax_scale=0.3, what="softmax_scale 0.3")
    x, _, _ = _fp8_case(shape, kind="gaussian")
    for scale in (0.05, 0.3):
        out, lse = zyfa.flash_attn_func(**x.kwargs(), causal=causal, softmax_scale=scale, return_lse=True, backend="triton")
        spec, lse_spec = _spec(x, causal=causal, softmax_scale=scale)
        _check_fp8_vs_spec(out, spec, f"softmax_scale {scale}", lse, lse_spec)
        ref = attention_fp64(*x.dequantized(), causal=causal, softmax_scale=scale)
        assert_rel(out, ref, 1.1 * rel_err(spec, ref) + rounding_error(ref, out.dtype), f"softmax_scale {scale} vs float64")


def _late_spike_case(seed=3):
    """FP8 inputs where the keys of a late block (keys 96..127 of 160) score far above the
    earlier ones for most rows: the lazy reference moves there (block max > A + 8 in log2)."""
    q, k, v = make("gaussian", 1, 64, 2, 1, 64, seqlen_k=160, seed=seed, device=DEVICE)
    k[:, 96:128] *= 6.0
    x = zyfa.quantize_fp8(q, k, v)
    qd, kd, _ = x.dequantized()
    t = _scores64(qd, kd, True) * LOG2E
    early = t[..., :96].amax(-1)
    late = t[..., 96:128].amax(-1)
    assert ((late - early) > 8 + 1).float().mean() > 0.3      # the reference moves in many rows
    return x


@pytest.mark.parametrize("ref_rule", ["block", "block_pow2", "running"])
def test_lazy_reference_moves(ref_rule):
    x = _late_spike_case()
    for p_rule in ("lean_cubic", "exact"):
        out, lse = zyfa.flash_attn_func(**x.kwargs(), causal=True, p_rule=p_rule, ref_rule=ref_rule, return_lse=True,
                                        backend="triton")
        spec, lse_spec = _spec(x, causal=True, p_rule=p_rule, ref_rule=ref_rule)
        _check_fp8_vs_spec(out, spec, f"{p_rule}/{ref_rule}", lse, lse_spec)
        ref, lse_ref = attention_fp64(*x.dequantized(), causal=True, return_lse=True)
        assert_rel(out, ref, 1.1 * rel_err(spec, ref) + rounding_error(ref, out.dtype), f"{p_rule}/{ref_rule} vs float64")


@pytest.mark.parametrize("ref_rule", ["running", "block_pow2"])
def test_fp8_reference_rules(ref_rule):
    x, ref, causal = _fp8_case((1, 80, 80, 2, 1, 64, 64, True), kind="gaussian")
    out = zyfa.flash_attn_func(causal=True, **x.kwargs(), ref_rule=ref_rule, backend="triton")
    spec = fp8_attention_spec(**x.kwargs(), ref_rule=ref_rule, block_n=32 if not HAS_GPU else 128,
                              fused_fma=HAS_GPU)
    _check_fp8_vs_spec(out, spec, ref_rule)


def test_fp8_per_token_scales():
    x, ref, causal = _fp8_case((1, 64, 64, 2, 1, 64, 64, True), granularity="fine")
    out = zyfa.flash_attn_func(causal=True, **x.kwargs(), backend="triton")
    spec = fp8_attention_spec(**x.kwargs(), block_n=32 if not HAS_GPU else 128, fused_fma=HAS_GPU)
    _check_fp8_vs_spec(out, spec, "per-token scales")
    assert_rel(out, ref, 1.1 * rel_err(spec, ref) + rounding_error(ref, out.dtype), "per-token scales vs fp64")


def test_repeatable_and_every_element_written():
    x, _, _ = _fp8_case((1, 50, 50, 2, 1, 64, 64, True))
    a = zyfa.flash_attn_func(causal=True, **x.kwargs(), backend="triton")
    if HAS_GPU:    # poison the allocator's free memory so unwritten output would show
        torch.full((1 << 24,), float("nan"), device=DEVICE)
    b = zyfa.flash_attn_func(causal=True, **x.kwargs(), backend="triton")
    assert torch.isfinite(b).all()
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))


def test_explain_names_a_backend():
    """BF16 d64: the generated kernel on an sm_90 GPU, the Triton kernel elsewhere with a GPU,
    the reference on a CPU without the interpreter (conftest may turn it on)."""
    from conftest import H100_CLASS
    from zyfa.device import interpreter_active
    q, k, v = make("gaussian", 1, 8, 2, 1, 64, device=DEVICE)
    text = zyfa.explain(q, k, v, causal=True)
    expected = "ptx" if H100_CLASS else "triton" if HAS_GPU or interpreter_active() else "reference"
    assert text.startswith(f"selected: {expected}"), text
    with pytest.raises(ValueError, match="backend must be"):
        zyfa.flash_attn_func(q, k, v, causal=True, backend="nope")
