"""Every bad input raises ValueError/TypeError naming the argument; NaN inputs give NaN rows."""
import pytest
import torch

import zyfa
from conftest import gpu
from zyfa.activations import make


def _qkv(B=1, S=8, H=2, Hkv=1, D=64, dtype=torch.bfloat16):
    return make("gaussian", B, S, H, Hkv, D, seed=0, dtype=dtype)


def _fp8():
    q, k, v = _qkv()
    return zyfa.quantize_fp8(q, k, v)


def test_wrong_rank():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="q must be 4-D"):
        zyfa.flash_attn_func(q[0], k, v, causal=True)


def test_wrong_dtype_and_mixed():
    q, k, v = _qkv()
    with pytest.raises(TypeError, match="q has dtype torch.float32"):
        zyfa.flash_attn_func(q.float(), k.float(), v.float(), causal=True)
    with pytest.raises(TypeError, match="share one dtype"):
        zyfa.flash_attn_func(q, k.half(), v, causal=True)


@pytest.mark.parametrize("name", ["float8_e5m2", "float8_e4m3fnuz"])
def test_other_fp8_formats(name):
    q, k, v = _qkv()
    dt = getattr(torch, name)
    with pytest.raises(TypeError, match="float8_e4m3fn"):
        zyfa.flash_attn_func(q.to(dt), k.to(dt), v.to(dt), causal=True)


def test_heads_not_divisible():
    q, _, _ = _qkv(H=3)
    _, k, v = _qkv(Hkv=2)
    with pytest.raises(ValueError, match=r"heads \(3\) must be divisible by kv_heads \(2\)"):
        zyfa.flash_attn_func(q, k, v, causal=True)


def test_head_dims():
    q, k, v = _qkv(D=96)
    with pytest.raises(ValueError, match="head dims"):
        zyfa.flash_attn_func(q, k, v, causal=True)
    q, k, v = _qkv(D=64)
    with pytest.raises(ValueError, match="same head_dim"):
        zyfa.flash_attn_func(q, torch.cat([k, k], -1), v, causal=True)


def test_causal_seqlen_q_greater():
    q, _, _ = _qkv(S=16)
    _, k, v = _qkv(S=8)
    with pytest.raises(ValueError, match="seqlen_q 16 > seqlen_k 8"):
        zyfa.flash_attn_func(q, k, v, causal=True)


def test_non_contiguous_last_dim():
    q, k, v = _qkv()
    qt = q.transpose(-1, -2).contiguous().transpose(-1, -2)
    with pytest.raises(ValueError, match="q must have a contiguous last dimension"):
        zyfa.flash_attn_func(qt, k, v, causal=True)


def test_devices_differ():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="one device"):
        zyfa.flash_attn_func(q, k.to("meta"), v, causal=True)


def test_descales():
    x = _fp8()
    with pytest.raises(ValueError, match="missing k_descale"):
        zyfa.flash_attn_func(x.q, x.k, x.v, causal=True, q_descale=x.q_descale, v_descale=x.v_descale)
    with pytest.raises(ValueError, match=r"k_descale has shape \(3,\)"):
        zyfa.flash_attn_func(causal=True, **{**x.kwargs(), "k_descale": torch.ones(3)})
    with pytest.raises(TypeError, match="q_descale must be float32"):
        zyfa.flash_attn_func(causal=True, **{**x.kwargs(), "q_descale": x.q_descale.double()})
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="descales apply to FP8 inputs only"):
        zyfa.flash_attn_func(q, k, v, causal=True, q_descale=torch.ones(()))


def test_empty_and_bad_scalars():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="empty"):
        zyfa.flash_attn_func(q[:, :0], k, v, causal=True)
    with pytest.raises(ValueError, match="softmax_scale"):
        zyfa.flash_attn_func(q, k, v, causal=True, softmax_scale=-1.0)
    with pytest.raises(TypeError, match="causal must be a bool"):
        zyfa.flash_attn_func(q, k, v, causal=1)
    with pytest.raises(ValueError, match="p_rule"):
        zyfa.flash_attn_func(q, k, v, causal=True, p_rule="fast")
    with pytest.raises(ValueError, match="backend must be"):
        zyfa.flash_attn_func(q, k, v, causal=True, backend="cuda-magic")


def test_nan_inputs_give_nan_rows():
    q, k, v = make("gaussian", 1, 40, 2, 1, 64, seed=1)
    q[0, 17, 1, 5] = float("nan")
    out = zyfa.flash_attn_func(q, k, v, causal=True)
    assert out[0, 17, 1].isnan().all()
    mask = torch.ones_like(out, dtype=torch.bool)
    mask[0, 17, 1] = False
    assert torch.isfinite(out[mask]).all()


@gpu
def test_fp8_nan_inputs_give_nan_rows():
    # GPU only: Triton's interpreter converts the E4M3 NaN code (0x7F) to 480 in dots
    x = zyfa.quantize_fp8(*make("gaussian", 1, 40, 2, 1, 64, seed=1, device="cuda"))
    x.q.view(torch.uint8)[0, 9, 0, 3] = 0x7F          # E4M3 NaN
    for rule in ("lean_cubic", "exact", "lean"):
        out = zyfa.flash_attn_func(causal=True, **x.kwargs(), p_rule=rule)
        assert out[0, 9, 0].isnan().all(), rule


def test_batch_and_kv_shapes():
    q, k, v = _qkv(B=2)
    _, k1, v1 = _qkv(B=1)
    with pytest.raises(ValueError, match="same batch size, got q 2, k 1"):
        zyfa.flash_attn_func(q, k1, v1, causal=True)
    with pytest.raises(ValueError, match=r"k and v must agree in \(batch, seqlen_k, kv_heads\)"):
        zyfa.flash_attn_func(q, k, v[:, :-1], causal=True)
    with pytest.raises(ValueError, match=r"k and v must agree"):
        zyfa.flash_attn_func(q, k, torch.cat([v, v], 2), causal=True)


def test_v_layout_and_types():
    q, k, v = _qkv()
    with pytest.raises(TypeError, match="q must be a torch.Tensor, got ndarray"):
        zyfa.flash_attn_func(q.float().numpy(), k, v, causal=True)
    vt = torch.empty(1, 8, 1, 64 * 2, dtype=v.dtype)[..., ::2].copy_(v)   # neither last dim nor seqlen contiguous
    with pytest.raises(ValueError, match="v must have a contiguous last dimension"):
        zyfa.flash_attn_func(q, k, vt, causal=True)
    with pytest.raises(TypeError, match="softmax_scale must be a real number"):
        zyfa.flash_attn_func(q, k, v, causal=True, softmax_scale=True)


@pytest.mark.parametrize("bad", [float("inf"), float("nan"), 0.0])
def test_softmax_scale_must_be_positive_finite(bad):
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="softmax_scale must be a positive finite number"):
        zyfa.flash_attn_func(q, k, v, causal=True, softmax_scale=bad)


def test_descale_device_and_values():
    x = _fp8()
    with pytest.raises(ValueError, match="v_descale is on meta but q is on cpu"):
        zyfa.flash_attn_func(causal=True, **{**x.kwargs(), "v_descale": x.v_descale.to("meta")})
    for name in ("q_descale", "k_descale", "v_descale"):
        bad = x.kwargs()[name].clone()
        bad.view(-1)[0] = float("nan")
        with pytest.raises(ValueError, match=f"{name} holds NaN or Inf"):
            zyfa.flash_attn_func(causal=True, **{**x.kwargs(), name: bad})
    with pytest.raises(TypeError, match="v_descale must be a torch.Tensor"):
        zyfa.flash_attn_func(causal=True, **{**x.kwargs(), "v_descale": 1.0})
    with pytest.raises(ValueError, match=r"q_descale has shape \(1, 2, 9\)"):
        zyfa.flash_attn_func(causal=True, **{**x.kwargs(), "q_descale": torch.ones(1, 2, 9)})
