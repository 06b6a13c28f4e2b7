"""zyfa.quantize_fp8: round trips, layouts, Hadamard and K smoothing are exact transformations."""
import pytest
import torch

from conftest import assert_rel, rel_err
from zyfa.activations import make
from zyfa.quantize import hadamard_matrix, quantize_fp8
from zyfa.spec.reference import attention_fp64


def _deq(x):
    return x.dequantized()


@pytest.mark.parametrize("granularity", ["head", "tensor", "fine"])
def test_round_trip_within_e4m3_precision(granularity):
    q, k, v = make("realistic", 2, 100, 4, 2, 128, seed=0, dtype=torch.float32)
    x = quantize_fp8(q, k, v, granularity=granularity, block_size=32)
    for name, a, b in zip("qkv", _deq(x), (q, k, v)):
        # E4M3 keeps 3 mantissa bits: relative rounding error <= 2^-4 on normal values
        assert_rel(a, b, 0.05, f"{name} round trip")
    assert x.v.stride(1) == 1, "v must be stored transposed (seqlen contiguous)"
    assert x.v.shape == v.shape


def test_descale_shapes():
    q, k, v = make("gaussian", 2, 70, 4, 2, 64, seed=0)
    h = quantize_fp8(q, k, v, granularity="head")
    assert h.q_descale.shape == (2, 2) and h.k_descale.shape == (2, 2) and h.v_descale.shape == (2, 2)
    f = quantize_fp8(q, k, v, granularity="fine", block_size=16)
    assert f.q_descale.shape == (2, 4, 70) and f.k_descale.shape == (2, 2, 70) and f.v_descale.shape == (2, 2, 64)
    # one scale per block of 16 tokens
    assert torch.equal(f.k_descale[..., 0], f.k_descale[..., 15]) and f.k_descale.dtype == torch.float32


@pytest.mark.parametrize("n", [64, 128, 192, 256])
def test_hadamard_is_orthonormal(n):
    h = hadamard_matrix(n, seed=3)
    assert torch.allclose(h @ h.T, torch.eye(n, dtype=torch.float64), atol=1e-12)


def test_rotation_and_smoothing_keep_attention():
    """Hadamard on q/k/v (with the output rotated back) and K smoothing change nothing in exact math."""
    q, k, v = make("realistic", 1, 64, 2, 1, 128, seed=4, dtype=torch.float64)
    ref = attention_fp64(q, k, v)
    r = hadamard_matrix(128, seed=0)
    rv = hadamard_matrix(128, seed=1)
    out = attention_fp64(q @ r, k @ r, v @ rv) @ rv.T
    assert_rel(out, ref, 1e-12, "rotation")
    out = attention_fp64(q, k - k.mean(1, keepdim=True), v)
    assert_rel(out, ref, 1e-12, "k smoothing")


def test_hadamard_reduces_error_on_realistic_inputs():
    q, k, v = make("realistic", 1, 256, 4, 2, 128, seed=6)
    ref = attention_fp64(q, k, v)

    def e2e(**kw):
        x = quantize_fp8(q, k, v, **kw)
        return rel_err(x.restore_output(attention_fp64(*_deq(x)).float()), ref)
    plain, rot = e2e(), e2e(hadamard=True)
    assert rot < 0.8 * plain, (plain, rot)


def test_bad_arguments():
    q, k, v = make("gaussian", 1, 8, 2, 1, 64)
    with pytest.raises(ValueError, match="granularity"):
        quantize_fp8(q, k, v, granularity="channel")
    with pytest.raises(ValueError, match="block_size"):
        quantize_fp8(q, k, v, granularity="fine", block_size=0)



@pytest.mark.parametrize("granularity", ["head", "tensor", "fine"])
def test_amax_maps_to_e4m3_max(granularity):
    """Each scale group's largest |value| lands on E4M3's largest finite value, 448: the
    scale is amax / 448, not something that wastes the format's top binades."""
    q, k, v = make("realistic", 2, 100, 4, 2, 64, seed=2, dtype=torch.float32)
    x = quantize_fp8(q, k, v, granularity=granularity, block_size=32)
    for name, t in (("q", x.q), ("k", x.k), ("v", x.v)):
        a = t.float().abs()
        assert a.max() == 448.0, (granularity, name, a.max())
    if granularity == "head":      # every (batch, kv head) group reaches 448, its descale is its amax / 448
        assert torch.all(x.k.float().abs().amax(dim=(1, 3)) == 448.0)
        assert torch.all(x.q.float().abs().reshape(2, 100, 2, 2, 64).amax(dim=(1, 3, 4)) == 448.0)
        for t, d in ((q.reshape(2, 100, 2, 2, 64).abs().amax(dim=(1, 3, 4)), x.q_descale),
                     (k.abs().amax(dim=(1, 3)), x.k_descale), (v.abs().amax(dim=(1, 3)), x.v_descale)):
            assert torch.equal(d, (t / 448.0).float()), (d, t / 448.0)


def test_smooth_k_keeps_attention():
    """K smoothing through the quantizer: the dequantized smoothed K gives the same attention
    within FP8's error (the mean over tokens shifts each row's scores by a constant), and on
    inputs with a shared K offset it is more accurate than without smoothing."""
    q, k, v = make("realistic", 1, 128, 4, 2, 128, seed=8, dtype=torch.float32)
    k = k + 3.0 * torch.randn(1, 1, 2, 128, generator=torch.Generator().manual_seed(1))   # a per-channel K bias
    ref = attention_fp64(q, k, v)
    plain = rel_err(attention_fp64(*_deq(quantize_fp8(q, k, v))), ref)
    smooth = rel_err(attention_fp64(*_deq(quantize_fp8(q, k, v, smooth_k=True))), ref)
    assert smooth < 0.8 * plain, (smooth, plain)
