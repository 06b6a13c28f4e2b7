"""E4M3 bit helpers and the P rules (zyfa.spec.rules) against torch's own FP8 and exp2."""
import pytest
import torch

from zyfa.spec.constants import P_ONE_BITS
from zyfa.spec.e4m3 import e4m3_decode, e4m3_encode_nonneg, round_f16
from zyfa.spec.rules import P_RULES, p_bits


def test_decode_matches_torch_for_all_codes():
    codes = torch.arange(256, dtype=torch.int32)
    ref = codes.to(torch.uint8).view(torch.float8_e4m3fn).double()
    got = e4m3_decode(codes)
    same = (got == ref) | (got.isnan() & ref.isnan())
    assert bool(same.all()), f"codes {codes[~same].tolist()} decode wrong"


def test_encode_rounds_like_torch():
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.rand(200_000, generator=g, dtype=torch.float64) * 448,
                   torch.rand(50_000, generator=g, dtype=torch.float64) * 2 ** -5])
    x = x.float().double()       # torch casts from float32
    ref = x.float().to(torch.float8_e4m3fn).view(torch.uint8).to(torch.int32)
    got = e4m3_encode_nonneg(x)
    assert torch.equal(got, ref), f"{int((got != ref).sum())} codes differ"


def test_exact_rule_is_round_to_nearest_of_exp2():
    y = -torch.rand(100_000, generator=torch.Generator().manual_seed(1)) * 20
    bits = p_bits(y, "exact")
    ref = torch.exp2(y.double() + 8).float().to(torch.float8_e4m3fn).view(torch.uint8).to(torch.int32)
    assert (bits != ref).float().mean() < 1e-4


def test_lean_rules_mismatch_rates_in_normal_range():
    """Naive lean is a piecewise-linear exp2; the corrections match round-to-nearest closely."""
    y = -torch.rand(1_000_000, generator=torch.Generator().manual_seed(2)) * 13
    exact = p_bits(y, "exact")
    rates = {r: (p_bits(y, r) != exact).float().mean().item() for r in ("lean", "lean_quad", "lean_cubic")}
    assert 0.3 < rates["lean"] < 0.6, rates
    assert rates["lean_quad"] < 0.03, rates
    assert rates["lean_cubic"] < 0.002, rates
    for r in ("lean", "lean_quad", "lean_cubic"):
        assert (p_bits(y, r) - exact).abs().max() <= 1, r


def test_round_f16_rounds_once_like_numpy():
    """The spec's half rounding from float64: nearest even, subnormals, overflow, in one step
    (numpy converts float64 to half directly; a cast through float32 could round twice)."""
    import numpy as np
    g = torch.Generator().manual_seed(4)
    x = torch.randn(400_000, dtype=torch.float64, generator=g) * torch.exp2(torch.randint(-30, 18, (400_000,), generator=g).double())
    ties = (torch.randint(-2000, 2000, (20_000,), generator=g).double() + 0.5) * 2.0 ** -10    # exact half-way points
    near = ties + 2.0 ** -40                                                                  # just past them
    x = torch.cat([x, ties, near, torch.tensor([65504.0, 65519.9, 65520.0, -1e6, 2.0 ** -25, 2.0 ** -24 * 1.5])])
    with np.errstate(over="ignore"):
        want = torch.from_numpy(x.numpy().astype(np.float16).astype(np.float64))
    assert torch.equal(round_f16(x), want)


@pytest.mark.slow
def test_half_precision_cubic_keeps_exacts_accuracy():
    """lean_cubic_f16 (the cubic in packed half precision): within one code of exact, a
    ~1% mismatch rate from rounding y and the steps to half, and attention error no higher
    than exact's on realistic activations."""
    import zyfa
    from zyfa.activations import make
    from zyfa.spec.reference import attention_fp64, fp8_attention_spec
    y = -torch.rand(1_000_000, generator=torch.Generator().manual_seed(2)) * 13
    exact, half = p_bits(y, "exact"), p_bits(y, "lean_cubic_f16")
    assert (half != exact).float().mean().item() < 0.015 and (half - exact).abs().max() <= 1
    assert 0 < (half != p_bits(y, "lean_cubic_f16", fused=False)).float().mean().item() < 1e-3
    q, k, v = make("realistic", 1, 512, 2, 1, 128, seed=8)
    x = zyfa.quantize_fp8(q, k, v)
    ref = attention_fp64(*x.dequantized())
    err = {r: ((fp8_attention_spec(**x.kwargs(), p_rule=r) - ref).norm() / ref.norm()).item()
           for r in ("exact", "lean_cubic_f16")}
    assert err["lean_cubic_f16"] <= 1.01 * err["exact"], err


def test_lean_bits_range_and_top():
    y = torch.tensor([0.0, -1.0, -2.5, -15.0, -40.0, float("-inf")])
    for r in P_RULES:
        b = p_bits(y, r)
        assert b[0] == P_ONE_BITS, (r, b)       # the block max is exactly 256
        assert b.min() >= 0 and b.max() <= P_ONE_BITS, (r, b)
        assert b[-1] == 0 and b[-2] == 0, (r, b)


def test_naive_lean_does_not_depend_on_fma_fusion():
    y = -torch.rand(100_000, generator=torch.Generator().manual_seed(3)) * 16
    assert torch.equal(p_bits(y, "lean", fused=True), p_bits(y, "lean", fused=False))
