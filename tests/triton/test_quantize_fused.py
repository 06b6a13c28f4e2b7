"""The fused Triton quantizer (zyfa.triton_kernels.quantize) gives quantize_fp8's bits: q, k, v
bytes, V's transposed padded buffer, descales. On the CPU it runs in Triton's interpreter."""
import pytest
import torch
from conftest import DEVICE

from zyfa.quantize import quantize_fp8, quantize_int8_qk
from zyfa.triton_kernels.quantize import quantize_fp8_fused
from zyfa.triton_kernels.quantize_int8 import quantize_int8_qk_fused

OPTIONS = [{}, {"smooth_k": True}, {"hadamard": True}, {"smooth_k": True, "hadamard": True}]
# (D, Dv, Hq, Hkv, Sq, Sk): GQA, odd lengths, 192-128
SHAPES = [(64, 64, 4, 2, 37, 41), (128, 128, 2, 1, 50, 19), (192, 128, 2, 2, 33, 17)]


def _bytes(t):
    return t.view(torch.uint8)


def assert_same(a, b):
    for name in "qkv":
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype == torch.float8_e4m3fn and x.shape == y.shape and x.stride() == y.stride(), name
        assert torch.equal(_bytes(x), _bytes(y)), f"{name}: {int((_bytes(x) != _bytes(y)).sum())} bytes differ"
        dx, dy = getattr(a, name + "_descale"), getattr(b, name + "_descale")
        assert dx.shape == dy.shape and torch.equal(dx, dy), f"{name}_descale differs"
    # V's whole buffer, (B, Hkv, Dv, Sk padded to 16) with the pad as zeros
    assert a.v.untyped_storage().nbytes() == b.v.untyped_storage().nbytes()
    assert bytes(a.v.untyped_storage().cpu()) == bytes(b.v.untyped_storage().cpu())
    assert (a.v_rotation is None) == (b.v_rotation is None)
    if a.v_rotation is not None:
        assert torch.equal(a.v_rotation, b.v_rotation)


def _inputs(shape, dtype=torch.bfloat16, seed=0):
    D, Dv, Hq, Hkv, Sq, Sk = shape
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, Sq, Hq, D, generator=g)
    k = torch.randn(2, Sk, Hkv, D, generator=g) + 1.5          # an offset for smooth_k to remove
    k[..., 3] *= 8                                              # an outlier channel
    v = torch.randn(2, Sk, Hkv, Dv, generator=g)
    return (x.to(dtype).to(DEVICE) for x in (q, k, v))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "d{}-{}_h{}-{}_s{}-{}".format(*s))
@pytest.mark.parametrize("opts", OPTIONS, ids=lambda o: "+".join(o) or "plain")
@pytest.mark.slow
def test_fused_equals_pytorch_head(shape, opts):
    q, k, v = _inputs(shape)
    assert_same(quantize_fp8(q, k, v, fused=False, **opts), quantize_fp8_fused(q, k, v, **opts))


@pytest.mark.parametrize("opts", [{}, {"smooth_k": True, "hadamard": True}], ids=["plain", "smooth_k+hadamard"])
def test_fused_equals_pytorch_tensor(opts):
    q, k, v = _inputs(SHAPES[0], dtype=torch.float32, seed=3)
    assert_same(quantize_fp8(q, k, v, "tensor", fused=False, **opts),
                quantize_fp8(q, k, v, "tensor", fused=True, **opts))


def test_rounding_ties_subnormals_saturation():
    """float32 inputs whose scaled values are E4M3 ties, subnormals (and their ties), -0,
    values just under 448: amax 448 makes the descale exactly 1."""
    vals = torch.tensor([448.0, 447.9, 1.0625, 1.1875, -1.0625, -0.0, 0.0, 3 * 2.0 ** -10, 2.0 ** -10,
                         5 * 2.0 ** -10, 2.0 ** -6 - 2.0 ** -12, 2.0 ** -6 - 2.0 ** -11, 2.0 ** -7, 1e-30,
                         -3 * 2.0 ** -10, 15.5, 17.0, 240.0 + 8.0, -(2.0 ** -30), 0.0009765625])
    base = torch.zeros(1, 5, 2, 64)
    base.view(-1)[:vals.numel()] = vals
    q, k, v = (base.clone().to(DEVICE) for _ in range(3))
    a, b = quantize_fp8(q, k, v, fused=False), quantize_fp8(q, k, v, fused=True)
    assert float(a.q_descale[0, 0]) == 1.0
    assert_same(a, b)


@pytest.mark.parametrize("opts", [{}, {"hadamard": True}, {"smooth_k": True}], ids=["plain", "hadamard", "smooth_k"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.slow
def test_nonfinite_element_confined(opts, bad):
    q, k, v = _inputs(SHAPES[0], dtype=torch.float32, seed=5)
    spot = {"q": (1, 7, 3, 5), "k": (0, 11, 1, 2), "v": (1, 4, 0, 9)}
    zq, zk, zv = q.clone(), k.clone(), v.clone()
    for t, z, name in ((q, zq, "q"), (k, zk, "k"), (v, zv, "v")):
        t[spot[name]] = bad
        # the rotation spreads the element over its row (all NaN then): the reference zeroes that row
        z[spot[name][:3] if opts.get("hadamard") else spot[name]] = 0.0
    got = quantize_fp8(q, k, v, fused=True, **opts)
    assert_same(quantize_fp8(q, k, v, fused=False, **opts), got)
    ref = quantize_fp8(zq, zk, zv, fused=True, **opts)
    for name in "qkv":
        d = getattr(got, name + "_descale")
        assert torch.isfinite(d).all(), name
        x = getattr(got, name).float()                         # (B, S, H, D)
        b, s, h, c = spot[name]
        row = torch.zeros(x.shape[:3], dtype=torch.bool)
        row[b, s, h] = True
        assert torch.isfinite(x[~row]).all(), name
        assert torch.isnan(x[b, s, h, c]), name
        if not opts.get("smooth_k"):        # smoothing's mean counts the zero, not the NaN
            assert torch.equal(d, getattr(ref, name + "_descale")), name
            assert torch.equal(_bytes(getattr(got, name))[~row], _bytes(getattr(ref, name))[~row]), name


def test_fused_option_errors(monkeypatch):
    q, k, v = _inputs(SHAPES[0])
    with pytest.raises(ValueError, match="fused=True.*'head' and 'tensor'.*'fine'"):
        quantize_fp8(q, k, v, granularity="fine", fused=True)
    with pytest.raises(TypeError, match="fused must be"):
        quantize_fp8(q, k, v, fused="yes")
    with pytest.raises(ValueError, match="'head' and 'tensor'"):
        quantize_fp8_fused(q, k, v, granularity="fine")
    # the same argument checks as quantize_fp8
    for bad in ({"granularity": "channel"}, {"seed": 1.5}):
        with pytest.raises((ValueError, TypeError)) as e1:
            quantize_fp8(q, k, v, fused=False, **bad)
        with pytest.raises(type(e1.value), match=str(e1.value).replace("(", r"\(").replace(")", r"\)")):
            quantize_fp8_fused(q, k, v, **bad)
    if DEVICE == "cpu":
        monkeypatch.setenv("TRITON_INTERPRET", "0")
        with pytest.raises(ValueError, match="needs CUDA tensors"):
            quantize_fp8(q, k, v, fused=True)
    with pytest.raises(TypeError, match="fused must be None, True or False"):
        quantize_fp8(q, k, v, fused=1)
    # the default: the kernel on NVIDIA GPUs for head/tensor granularity, PyTorch elsewhere
    calls = []
    monkeypatch.setattr("zyfa.triton_kernels.quantize.quantize_fp8_fused", lambda *a, **kw: calls.append(a))
    quantize_fp8(q, k, v, granularity="fine")
    assert calls == []
    quantize_fp8(q, k, v)
    assert len(calls) == (1 if DEVICE == "cuda" and torch.version.hip is None else 0)


def test_fused_strided_inputs():
    """q, k, v as views of one packed (B, S, 3, H, D) tensor, float16: strides are honoured."""
    qkv = torch.randn(2, 29, 3, 2, 64, generator=torch.Generator().manual_seed(7)).half().to(DEVICE)
    q, k, v = qkv.unbind(2)
    opts = {"smooth_k": True, "hadamard": True}
    assert_same(quantize_fp8(q, k, v, fused=False, **opts), quantize_fp8(q, k, v, fused=True, **opts))


@pytest.mark.slow
def test_fused_kernel_compiles_for_sm90_and_gfx950():
    """Every pass of the fused quantizer compiles for the H200 and MI355X on the CPU (a
    subprocess without TRITON_INTERPRET): on a CPU-only machine this is the check
    that the interpreter's Python does not hide code the compiler refuses."""
    import os
    import subprocess
    import sys
    code = """
from zyfa.verify.triton_compile import compile_int8_quantizer, compile_quantizer
for target in ("sm90", "gfx950"):
    for mode, had, smooth, tensor in ((0, False, False, False), (1, True, True, False), (1, False, False, True),
                                      (2, True, True, False), (2, True, False, True), (2, False, False, False)):
        compile_quantizer(target, mode, had, smooth, per_tensor=tensor)
    for had, smooth in ((True, True), (False, False)):
        compile_int8_quantizer(target, had, smooth)
print("ok")
"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-3000:]


def assert_same_int8(a, b):
    """quantize_int8_qk's outputs: int8 q and k, E4M3 V^T (whole padded buffer), descales with
    their NaNs in the same places."""
    for name in "qk":
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype == torch.int8 and x.shape == y.shape and x.stride() == y.stride(), name
        assert torch.equal(x, y), f"{name}: {int((x != y).sum())} codes differ"
    assert a.v.dtype == b.v.dtype == torch.float8_e4m3fn and a.v.stride() == b.v.stride()
    assert bytes(a.v.untyped_storage().cpu()) == bytes(b.v.untyped_storage().cpu())
    for name in ("q_descale", "k_descale", "v_descale"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.shape == y.shape and torch.equal(x.isnan(), y.isnan()), name
        assert torch.equal(x.nan_to_num(0.0), y.nan_to_num(0.0)), f"{name} differs"


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "d{}-{}_h{}-{}_s{}-{}".format(*s))
@pytest.mark.parametrize("opts", [{}, {"smooth_k": False}, {"hadamard": False, "key_block": 16},
                                  {"key_block": 20}], ids=["default", "no-smooth", "no-hadamard-kb16", "kb20"])
def test_int8_fused_equals_pytorch(shape, opts):
    """The INT8 Q.K^T quantizer in Triton gives quantize_int8_qk's bits: per-token q scales, k
    scales per key block (blocks of 16 and 20 keys cut the 17-50-key sequences mid-tile)."""
    q, k, v = _inputs(shape, seed=5)
    assert_same_int8(quantize_int8_qk(q, k, v, fused=False, **opts), quantize_int8_qk_fused(q, k, v, **opts))


@pytest.mark.parametrize("dims", [(16, 16), (24, 24), (256, 128)], ids=["d16", "d24", "d256-128"])
def test_int8_fused_equals_pytorch_at_other_rotation_blocks(dims):
    """Rotation blocks of 16, 8 and 256 columns (head dims 16, 24 and 256 against the
    d64-d192 shapes above) give quantize_int8_qk's bits: the butterflies' gathered and
    in-register stages split differently at each."""
    D, Dv = dims
    q, k, v = _inputs((D, Dv, 2, 1, 29, 23), seed=7)
    assert_same_int8(quantize_int8_qk(q, k, v, fused=False), quantize_int8_qk_fused(q, k, v))


def test_int8_fused_rounding_ties_and_nonfinite():
    """float32 rows whose scaled values are ties (x.5: half to even) and +-127 (amax 127 gives
    descale 1 exactly), and a NaN in q and an Inf in k: q's token's and k's block's descales are NaN and
    their codes 0, every other token as the PyTorch path."""
    S, D = 40, 64
    ties = torch.tensor([0.5, 1.5, 2.5, -0.5, -2.5, 126.5, -126.5, 127.0, -127.0, 3.5])
    q = torch.randn(1, S, 2, D, generator=torch.Generator().manual_seed(2))
    q[0, :, :, :10] = ties
    q[0, :, :, 10:] = q[0, :, :, 10:].clamp(-100, 100)
    k = q[:, :, :1].clone()
    v = torch.randn(1, S, 1, D)
    q[0, 5, 1, 7], k[0, 9, 0, 3] = float("nan"), float("inf")
    q, k, v = (x.to(DEVICE) for x in (q, k, v))
    opts = {"smooth_k": False, "hadamard": False}
    a, b = quantize_int8_qk(q, k, v, fused=False, **opts), quantize_int8_qk(q, k, v, fused=True, **opts)
    assert_same_int8(a, b)
    assert b.q[0, 0, 0, :10].tolist() == [0, 2, 2, 0, -2, 126, -126, 127, -127, 4]
    assert int(b.q_descale.isnan().sum()) == 1 and int(b.k_descale.isnan().sum()) == 1
    assert b.q_descale[0, 1, 5].isnan() and b.k_descale[0, 0, 0].isnan()     # k: its block of 128 keys
    assert int(b.q[0, 5, 1, 7]) == 0 and int(b.k[0, 9, 0, 3]) == 0


def test_fused_calls_share_no_tensor_a_caller_can_change():
    """The rotation's parts are made once a device (no host copy a call); what a call returns
    is the caller's own: changing one call's v_rotation, or its k descales, changes nothing in
    the next call."""
    q, k, v = _inputs(SHAPES[1])
    a = quantize_fp8_fused(q, k, v, hadamard=True)
    want = a.v_rotation.clone()
    a.v_rotation.zero_()
    b = quantize_fp8_fused(q, k, v, hadamard=True)
    assert torch.equal(b.v_rotation, want) and b.v_rotation.data_ptr() != a.v_rotation.data_ptr()
    x = quantize_int8_qk_fused(q, k, v)
    x.k_descale.fill_(-1.0)
    assert_same_int8(quantize_int8_qk(q, k, v, fused=False), quantize_int8_qk_fused(q, k, v))


@pytest.mark.parametrize("programs", [1, 20, 1024], ids=["one-chunk", "ragged-chunks", "a-tile-a-program"])
def test_k_sums_in_chunks_equal_pytorch(monkeypatch, programs):
    """smooth_k's sums from _sums_pass's chunks of several tiles, added by atomics (fewer
    programs asked for: 19 tiles of 8 keys in one chunk, or chunks of 8, 8 and 3 tiles), divided
    as channel_mean divides them, equal zyfa.quantize.smooth_mean bit for bit, a NaN and an
    Inf left out of their channels' sums and counts; v's amax from the same launch."""
    import zyfa.triton_kernels.quantize as fused
    from zyfa.quantize import smooth_mean
    monkeypatch.setattr(fused, "SUM_PROGRAMS", programs)
    B, S, H, D = 2, 150, 3, 192
    g = torch.Generator().manual_seed(4)
    k = (torch.randn(B, S, H, D, generator=g) * 3 + 1.25).to(torch.bfloat16)
    k[1, 77, 2, 5], k[0, 149, 0, 191] = float("nan"), float("-inf")
    v = torch.randn(B, S, H, 64, generator=g).to(torch.bfloat16)
    v[0, 3, 1, 7] = float("inf")
    k, v = k.to(DEVICE), v.to(DEVICE)
    sums, v_amax = fused.channel_sums(k, v)                                  # (B * H, 2, 256), zero past D
    got = (sums[:, 0] / sums[:, 1].clamp(min=1)).float()
    want = smooth_mean(k.float())                                       # (B, 1, H, D)
    assert torch.equal(got[:, :D], want.reshape(B * H, D)) and not sums[:, :, D:].any()
    vf = v.float().reshape(B, S, H, 64)
    want_amax = torch.where(vf.isfinite(), vf.abs(), 0.0).amax(dim=(1, 3)).reshape(B * H)
    assert torch.equal(v_amax.view(torch.float32), want_amax)


def _rn32(hi, lo):
    """float32 nearest-even of the exact sum hi + lo (float64 numbers, |lo| <= half an ulp of
    hi): hi rounded, unless hi sits on a float32 midpoint, where lo's sign picks the side."""
    import numpy as np
    r = hi.astype(np.float32)
    up, down = np.nextafter(r, np.float32(np.inf)), np.nextafter(r, np.float32(-np.inf))
    mid_up = (up.astype(np.float64) + r) / 2 == hi            # hi is the midpoint above r
    mid_down = (down.astype(np.float64) + r) / 2 == hi
    r = np.where(mid_up & (lo > 0), up, r)
    return np.where(mid_down & (lo < 0), down, r)


def _fma32(a, b, c):
    """float32 fma: the product exact in float64, the sum split exactly (two-sum), one rounding."""
    import numpy as np
    p = a.astype(np.float64) * b
    s = p + c
    bp = s - p
    lo = (p - (s - bp)) + (c - bp)
    return _rn32(s, lo)


def test_quotient_by_reciprocal_equals_ieee_division():
    """The quantizer's division on the GPU (quotient's FMA_DIV form: n = -RN(1 / d),
    q' = RN(x n), e = fma(q', d, x), -fma(e, n, q')) is IEEE float32 x / d bit for bit, the
    sign of zero included, wherever the quantizers divide: |x| <= the amax that d is taken
    from (d = amax / 448 or / 127, amax >= 1e-12), emulated here with exact float64 steps.
    The interpreter runs the IEEE division itself, so this is the CPU's check of that form."""
    import numpy as np
    rng = np.random.default_rng(7)
    n = 400_000
    amax = np.exp2(rng.uniform(-40, 100, n)).astype(np.float32)
    mant = rng.integers(0, 1 << 23, n, dtype=np.int64)
    mant[: n // 8] = (1 << 23) - 1 - rng.integers(0, 4, n // 8)          # mantissas of all ones and near
    mant[n // 8: n // 4] = rng.integers(0, 4, n // 4 - n // 8)          # powers of two and near
    amax = ((amax.view(np.int32) & ~0x7FFFFF) | mant.astype(np.int32)).view(np.float32)
    amax = np.maximum(amax, np.float32(1e-12))
    d = np.where(rng.random(n) < 0.5, amax / np.float32(448), amax / np.float32(127)).astype(np.float32)
    x = (amax * rng.uniform(-1, 1, n).astype(np.float32) * np.exp2(-rng.integers(0, 24, n))).astype(np.float32)
    x[:8] = [0.0, -0.0, 1.0, -1.0, 448.0, -448.0, 127.0, -127.0]
    d[:8] = 1.0
    keep = np.abs(x.astype(np.float64) / d) >= np.finfo(np.float32).tiny          # normal quotients
    keep |= x == 0
    x, d = x[keep], d[keep]
    with np.errstate(over="ignore", under="ignore"):
        neg_r = -(np.float32(1.0) / d)
        q = (x * neg_r).astype(np.float32)
        e = _fma32(q, d, x)
        got = -_fma32(e, neg_r, q)
        want = x / d
    assert got.dtype == want.dtype == np.float32 and len(x) > n * 0.9
    bad = got.view(np.int32) != want.view(np.int32)
    assert not bad.any(), f"{int(bad.sum())} quotients differ, e.g. x={x[bad][:3]}, d={d[bad][:3]}"
