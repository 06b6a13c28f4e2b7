"""The Triton kernel that writes V^T in the Hopper key order: the spec's bytes for every
layout a caller passes (contiguous V, quantize_fp8's transposed V, a slice), key counts that
are and are not multiples of 16, and the head dims the FP8 kernels take."""
import pytest
import torch

from conftest import DEVICE
from zyfa.spec.key_order import hopper_vt as spec_hopper_vt
from zyfa.hopper_vt import hopper_vt


def _bytes(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, shape, generator=g, dtype=torch.uint8).view(torch.float8_e4m3fn).to(DEVICE)


@pytest.mark.parametrize("B, Sk, Hkv, Dv", [(1, 1, 1, 64), (2, 17, 2, 128), (1, 130, 3, 256), (2, 300, 1, 128)])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "slice"])
def test_equals_the_spec(B, Sk, Hkv, Dv, layout):
    if layout == "contiguous":
        v = _bytes(B, Sk, Hkv, Dv, seed=Sk)
    elif layout == "transposed":           # quantize_fp8's V: keys contiguous, rows padded to 16
        pad = (-Sk) % 16
        v = _bytes(B, Hkv, Dv, Sk + pad, seed=Sk).permute(0, 3, 1, 2)[:, :Sk]
    else:                                  # every other key of a longer V
        v = _bytes(B, 2 * Sk, Hkv, Dv, seed=Sk)[:, ::2]
    out = hopper_vt(v)
    want = spec_hopper_vt(v)
    assert out.shape == want.shape and out.is_contiguous()
    assert torch.equal(out, want.contiguous())


@pytest.mark.parametrize("shapes", [((), (), ()), ((2,), (2,), (2,)), ((3, 2), (3, 2), (3, 2, 128)),
                                    ((3, 2), (), (3, 2))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_hopper_inputs_are_the_spec_factors_and_vt(shapes, dtype):
    """The dense FP8 call's one preparing launch: V^T as hopper_vt writes it, the score
    factors bit for bit head_factor's and the V descales per_channel_v_descale's, for every
    descale shape validation admits (bfloat16 q / k descales: head_factor's own launches)."""
    from zyfa.hopper_vt import hopper_inputs
    from zyfa.spec.descales import head_factor, per_channel_v_descale
    B, Sk, Hkv, Dv = 3, 40, 2, 128
    v = _bytes(B, Sk, Hkv, Dv, seed=5)
    g = torch.Generator().manual_seed(len(shapes[2]))
    qd, kd, vd = (torch.rand(s, generator=g).mul(0.03).add(1e-3).to(DEVICE, dtype if i < 2 else torch.float32)
                  for i, s in enumerate(shapes))
    scale = 0.0883883476
    vt, fac, vds = hopper_inputs(v, qd, kd, vd, scale)
    assert torch.equal(vt, spec_hopper_vt(v).contiguous())
    want_fac = head_factor(qd, kd, B, Hkv, scale, v.device)
    assert fac.dtype == torch.float32 and torch.equal(fac, want_fac), (fac, want_fac)
    assert torch.equal(vds, per_channel_v_descale(vd, B, Hkv, Dv))


@pytest.mark.parametrize("Sk", [32, 40])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_natural_order_inputs(Sk, layout):
    """With K's rows in slot order (zyfa.spec.key_order.slot_order_rows) V^T is read in its own
    key order: quantize_fp8's transposed V where it lies (a view, the launch writing only the
    factors) when its strides suit TMA, else a copy zero-padded to 16 keys; the factors as ever."""
    from zyfa.hopper_vt import hopper_inputs, natural_vt
    from zyfa.spec.descales import head_factor
    B, Hkv, Dv = 2, 2, 128
    if layout == "contiguous":
        v = _bytes(B, Sk, Hkv, Dv, seed=Sk)
    else:
        v = _bytes(B, Hkv, Dv, Sk, seed=Sk).permute(0, 3, 1, 2)
    qd, kd, vd = torch.full((B, Hkv), 0.01, device=DEVICE), torch.full((B, Hkv), 0.02, device=DEVICE), \
        torch.full((B, Hkv), 0.5, device=DEVICE)
    vt, fac, _ = hopper_inputs(v, qd, kd, vd, 0.125, key_order=False)
    view = layout == "transposed" and Sk % 16 == 0
    assert (natural_vt(v) is not None) == view
    assert (vt.data_ptr() == v.data_ptr()) == view
    want = torch.zeros(B, Hkv, Dv, Sk + (-Sk) % 16, dtype=torch.uint8, device=DEVICE)
    want[..., :Sk] = v.view(torch.uint8).permute(0, 2, 3, 1)
    assert torch.equal(vt, want)
    assert torch.equal(fac, head_factor(qd, kd, B, Hkv, 0.125, v.device))
