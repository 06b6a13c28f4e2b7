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

from conftest import DEVICE, HAS_GPU, assert_rel, describe_mismatch, rel_err
import zyfa
from zyfa.activations import make
from zyfa.spec.reference import attention_fp64, fp8_attention_spec

SHAPES = [  # B, Sq, Sk, Hq, Hkv, D, Dv, causal
    (1, 70, 70, 2, 1, 128, 128, True),      # seqlen not a multiple of the block, MQA
    (2, 33, 97, 4, 2, 64, 64, True),        # seqlen_q < seqlen_k (bottom-right)
    (1, 1, 45, 2, 2, 64, 64, True),         # one query row
    (1, 1, 1, 2, 1, 128, 128, True),        # one token
    (1, 48, 64, 2, 1, 192, 128, True),      # MLA head dims
    (1, 40, 50, 2, 1, 256, 256, False),     # non-causal, head dim 256
]


def _bf16_baseline(q, k, v, causal):
    """The same precision done in torch: float64 attention with P rounded to bf16."""
    Sq, Sk, g = q.shape[1], k.shape[1], q.shape[2] // k.shape[2]
    s = torch.einsum("bqhd,bkhd->bhqk", q.double(), k.double().repeat_interleave(g, 2)) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.arange(Sk, device=q.device)[None] >
                          torch.arange(Sq, device=q.device)[:, None] + Sk - Sq, float("-inf"))
    p = torch.exp(s - s.amax(-1, keepdim=True))
    o = torch.einsum("bhqk,bkhd->bqhd", p.bfloat16().double(), v.double().repeat_interleave(g, 2))
    return (o / p.sum(-1).transpose(1, 2)[..., None]).bfloat16()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_kernel_vs_fp64(shape, dtype):
    B, Sq, Sk, Hq, Hkv, D, Dv, causal = shape
    q, k, v = make("realistic", B, Sq, Hq, Hkv, D, Dv, seqlen_k=Sk, seed=Sq * 7 + Sk, dtype=dtype, device=DEVICE)
    out, lse = zyfa.flash_attn_func(q, k, v, causal=causal, return_lse=True, backend="triton")
    ref, lse_ref = attention_fp64(q, k, v, causal=causal, return_lse=True)
    base = rel_err(_bf16_baseline(q, k, v, causal), ref)
    assert out.dtype == (torch.float16 if dtype == torch.float16 else torch.bfloat16)
    assert out.shape == (B, Sq, Hq, Dv) and lse.shape == (B, Hq, Sq) and lse.dtype == torch.float32
    assert_rel(out, ref, 1.5 * base + 2e-4, f"{dtype} kernel")
    assert (lse.double() - lse_ref).abs().max() < 1e-3, describe_mismatch(lse, lse_ref, 1e-3)


def _fp8_case(shape, kind="realistic", granularity="head"):
    B, Sq, Sk, Hq, Hkv, D, Dv, causal = shape
    q, k, v = make(kind, B, Sq, Hq, Hkv, D, Dv, seqlen_k=Sk, seed=Sq + 3 * Sk, device=DEVICE)
    x = zyfa.quantize_fp8(q, k, v, granularity=granularity, block_size=16)
    ref = attention_fp64(*x.dequantized(), causal=causal)
    return x, ref, causal


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("p_rule", ["lean_cubic", "lean", "exact", "lean_cubic_f16"])
def test_fp8_kernel_vs_spec(shape, p_rule):
    x, ref, causal = _fp8_case(shape)
    out, lse = zyfa.flash_attn_func(**x.kwargs(), causal=causal, p_rule=p_rule, return_lse=True, backend="triton")
    spec, lse_spec = fp8_attention_spec(**x.kwargs(), causal=causal, p_rule=p_rule, return_lse=True,
                                        block_n=32 if not HAS_GPU else 128, fused_fma=HAS_GPU)
    spec_err = rel_err(spec, ref)
    if not HAS_GPU:
        same = (out == spec.to(out.dtype)).float().mean().item()
        assert same >= 0.999, f"{p_rule}: only {same:.4%} of outputs equal the spec; " + describe_mismatch(out, spec)
        assert (lse.double() - lse_spec).abs().max() < 1e-5
    else:
        # P bits flip where wgmma's accumulation moves t across a rounding boundary
        assert rel_err(out, spec) <= max(1.0 * spec_err, 2e-3), (p_rule, rel_err(out, spec), spec_err)
        assert (lse.double() - lse_spec).abs().max() < 0.05
    assert rel_err(out, ref) <= 1.1 * spec_err + 2e-3, (p_rule, rel_err(out, ref), spec_err)


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
        assert (out == spec.to(out.dtype)).float().mean().item() >= 0.999, describe_mismatch(out, spec)
    assert rel_err(out, ref) <= 1.1 * rel_err(spec, ref) + 2e-3, (rel_err(out, ref), rel_err(spec, ref))


@pytest.mark.parametrize("shape", [(2, 70, 70, 2, 1, 128, 128, True), (1, 48, 100, 2, 1, 192, 128, True),
                                   (1, 33, 97, 4, 2, 64, 64, False)])
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


@pytest.mark.parametrize("ref_rule", ["running", "block_pow2"])
def test_fp8_reference_rules(ref_rule):
    x, ref, causal = _fp8_case((1, 80, 80, 2, 1, 64, 64, True), kind="gaussian")
    out = zyfa.flash_attn_func(**x.kwargs(), ref_rule=ref_rule, backend="triton")
    spec = fp8_attention_spec(**x.kwargs(), ref_rule=ref_rule, block_n=32 if not HAS_GPU else 128,
                              fused_fma=HAS_GPU)
    assert_rel(out, spec, 2e-3 if not HAS_GPU else 2e-2, ref_rule)


def test_fp8_per_token_scales():
    x, ref, causal = _fp8_case((1, 64, 64, 2, 1, 64, 64, True), granularity="fine")
    out = zyfa.flash_attn_func(**x.kwargs(), backend="triton")
    spec = fp8_attention_spec(**x.kwargs(), block_n=32 if not HAS_GPU else 128, fused_fma=HAS_GPU)
    assert_rel(out, spec, 2e-3 if not HAS_GPU else 2e-2, "per-token scales")
    assert_rel(out, ref, 1.1 * rel_err(spec, ref) + 2e-3, "per-token scales vs fp64")


def test_repeatable_and_every_element_written():
    x, _, _ = _fp8_case((1, 50, 50, 2, 1, 64, 64, True))
    a = zyfa.flash_attn_func(**x.kwargs(), backend="triton")
    if HAS_GPU:    # poison the allocator's free memory so unwritten output would show
        torch.full((1 << 24,), float("nan"), device=DEVICE)
    b = zyfa.flash_attn_func(**x.kwargs(), backend="triton")
    assert torch.isfinite(b).all()
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))


def test_explain_names_a_backend():
    q, k, v = make("gaussian", 1, 8, 2, 1, 64, device=DEVICE)
    text = zyfa.explain(q, k, v)
    assert text.startswith("selected: triton"), text
    with pytest.raises(ValueError, match="backend must be"):
        zyfa.flash_attn_func(q, k, v, backend="nope")
