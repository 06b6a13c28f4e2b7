"""Code written for FlashAttention-2 and -3 runs on zyfa as written: their signatures, defaults
(causal=False), return conventions and options; what zyfa cannot do raises naming the argument.
Also the small argument checks around them (softmax_scale types, quantizers, capture, gather)."""
import numpy as np
import pytest
import torch

from conftest import DEVICE, rel_err
import zyfa
from zyfa.activations import make
from zyfa.spec.reference import attention_fp64


def _qkv(Sq=48, Sk=64, seed=0):
    return make("realistic", 2, Sq, 4, 2, 64, 64, seqlen_k=Sk, seed=seed, dtype=torch.bfloat16, device=DEVICE)


def test_causal_defaults_to_false_as_in_flashattention():
    q, k, v = _qkv(seed=1)
    full = attention_fp64(q, k, v, causal=False)
    causal = attention_fp64(q, k, v, causal=True)
    out = zyfa.flash_attn_func(q, k, v, backend="reference")
    assert rel_err(out, full) < 1e-2 < rel_err(out, causal)
    cu = torch.tensor([0, 48], dtype=torch.int32)
    cu_k = torch.tensor([0, 64], dtype=torch.int32)
    packed = zyfa.flash_attn_varlen_func(q[0], k[0], v[0], cu, cu_k, 48, 64, backend="reference")
    assert torch.equal(packed, out[0])


def test_flashattention3_calls_as_written():
    """FA3's positional order (softmax_scale, causal, qv, q_descale, k_descale, v_descale,
    window_size, ...) and its return_attn_probs -> (out, softmax_lse)."""
    q, k, v = _qkv(seed=2)
    scale = 0.1
    x = zyfa.quantize_fp8(q, k, v)
    out, lse = zyfa.flash_attn_func(x.q, x.k, x.v, scale, True, None, x.q_descale, x.k_descale, x.v_descale,
                                    (-1, -1), 0, 0.0, 1, None, False, 0, True, backend="reference")
    want, want_lse = zyfa.flash_attn_func(**x.kwargs(), softmax_scale=scale, causal=True, return_lse=True,
                                          backend="reference")
    assert torch.equal(out, want) and torch.equal(lse, want_lse)
    a, b = zyfa.flash_attn_func(q, k, v, causal=True, window_size=(16, 0), num_splits=4, pack_gqa=True,
                                deterministic=True, sm_margin=8, return_attn_probs=True, backend="reference")
    ref, ref_lse = attention_fp64(q, k, v, causal=True, window_size=(16, 0), return_lse=True)
    assert rel_err(a, ref) < 1e-2 and (b.double() - ref_lse).abs().max() < 1e-3
    # varlen, FA3 order: cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q, seqused_k, softmax_scale, causal
    cu_q = torch.tensor([0, 48, 96], dtype=torch.int32)
    cu_k = torch.tensor([0, 64, 128], dtype=torch.int32)
    o = zyfa.flash_attn_varlen_func(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), cu_q, cu_k, 48, 64, None, None,
                                    scale, True, backend="reference")
    dense = zyfa.flash_attn_func(q, k, v, softmax_scale=scale, causal=True, backend="reference")
    assert torch.equal(o, dense.flatten(0, 1))


def test_flashattention2_calls_as_written():
    """FA2's keywords: dropout_p=0.0, alibi_slopes=None, deterministic, return_attn_probs, window_size."""
    q, k, v = _qkv(seed=3)
    out = zyfa.flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=True, window_size=(-1, -1),
                               alibi_slopes=None, deterministic=False, backend="reference")
    assert torch.equal(out, zyfa.flash_attn_func(q, k, v, causal=True, backend="reference"))
    cu_q = torch.tensor([0, 48, 96], dtype=torch.int32)
    cu_k = torch.tensor([0, 64, 128], dtype=torch.int32)
    o = zyfa.flash_attn_varlen_func(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), cu_q, cu_k, 48, 64,
                                    dropout_p=0.0, causal=True, window_size=(-1, -1), backend="reference")
    assert torch.equal(o, out.flatten(0, 1))


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_paged_cache_either_convention_same_result(fp8):
    """A paged KV cache with its lengths as seqused_k (FA3, vLLM; cu_seqlens_k left out) or as
    cu_seqlens_k (FlashAttention-2): the same output, bit for bit."""
    lens_q, lens_k = [5, 20, 1], [40, 20, 33]
    g = torch.Generator().manual_seed(4)
    q = torch.randn(sum(lens_q), 4, 64, generator=g).to(DEVICE, torch.bfloat16)
    k = torch.randn(sum(lens_k), 2, 64, generator=g).to(DEVICE, torch.bfloat16)
    v = torch.randn(sum(lens_k), 2, 64, generator=g).to(DEVICE, torch.bfloat16)
    cu_q = torch.tensor([0, 5, 25, 26], dtype=torch.int32)
    cu_k = torch.tensor([0, 40, 60, 93], dtype=torch.int32)
    ds = {}
    if fp8:
        x = zyfa.quantize_fp8_varlen(q, k, v, cu_q, cu_k)
        q, k, v = x.q, x.k, x.v
        ds = dict(q_descale=x.q_descale, k_descale=x.k_descale, v_descale=x.v_descale)
    kp, vp, table, used = zyfa.varlen.paged_kv_cache(k, v, cu_k, 16)
    vllm = zyfa.flash_attn_varlen_func(q, kp, vp, max_seqlen_q=20, cu_seqlens_q=cu_q, max_seqlen_k=40,
                                       seqused_k=used, block_table=table, causal=True, backend="reference", **ds)
    fa2 = zyfa.flash_attn_varlen_func(q, kp, vp, cu_q, cu_k, 20, 40, causal=True, block_table=table,
                                      backend="reference", **ds)
    packed = zyfa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, causal=True, backend="reference", **ds)
    assert torch.equal(vllm, fa2) and torch.equal(vllm, packed)


@pytest.mark.parametrize("option,value", [("softcap", 30.0), ("dropout_p", 0.1), ("alibi_slopes", torch.ones(4)),
                                          ("qv", torch.ones(1)), ("attention_chunk", 64)])
def test_unsupported_options_raise_naming_them(option, value):
    q, k, v = _qkv()
    with pytest.raises(NotImplementedError, match=option):
        zyfa.flash_attn_func(q, k, v, causal=True, **{option: value})
    cu = torch.tensor([0, 48], dtype=torch.int32)
    with pytest.raises(NotImplementedError, match=option):
        zyfa.flash_attn_varlen_func(q[0], k[0], v[0], cu, cu, **{option: value})
    with pytest.raises(NotImplementedError, match="seqused_q"):
        zyfa.flash_attn_varlen_func(q[0], k[0], v[0], cu, cu, seqused_q=torch.tensor([48], dtype=torch.int32))


def test_out_and_return_softmax_lse():
    q, k, v = _qkv(seed=5)
    want, want_lse = zyfa.flash_attn_func(q, k, v, causal=True, return_lse=True, backend="reference")
    buf = torch.full_like(want, float("nan"))
    got, lse = zyfa.flash_attn_func(q, k, v, causal=True, out=buf, return_softmax_lse=True, backend="reference")
    assert got is buf and torch.equal(buf, want) and torch.equal(lse, want_lse)
    with pytest.raises(ValueError, match="out must have shape"):
        zyfa.flash_attn_func(q, k, v, causal=True, out=buf[:, :3], backend="reference")
    with pytest.raises(TypeError, match="out must be a torch.Tensor"):
        zyfa.flash_attn_func(q, k, v, causal=True, out=np.zeros(3), backend="reference")
    cu_q, cu_k = (torch.tensor([0, n, 2 * n], dtype=torch.int32) for n in (48, 64))
    flat = torch.empty(96, 4, 64, dtype=torch.bfloat16, device=DEVICE)
    o = zyfa.flash_attn_varlen_func(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), cu_q, cu_k, causal=True,
                                    out=flat, backend="reference")
    assert o is flat and torch.equal(flat, want.flatten(0, 1))


@pytest.mark.parametrize("scale", [0.125, 1, np.float32(0.125), np.float64(0.125), np.int64(1), torch.tensor(0.125),
                                   torch.tensor(0.125, dtype=torch.float64)])
def test_softmax_scale_any_real_scalar(scale):
    q, k, v = _qkv(seed=6)
    got = zyfa.flash_attn_func(q, k, v, causal=True, softmax_scale=scale, backend="reference")
    assert torch.equal(got, zyfa.flash_attn_func(q, k, v, causal=True, softmax_scale=float(scale), backend="reference"))


@pytest.mark.parametrize("scale,error", [(np.float32(-1.0), ValueError), (torch.tensor([0.1]), TypeError),
                                         (torch.tensor(True), TypeError), ("0.1", TypeError), (np.bool_(True), TypeError)])
def test_softmax_scale_bad_values(scale, error):
    q, k, v = _qkv()
    with pytest.raises(error, match="softmax_scale"):
        zyfa.flash_attn_func(q, k, v, causal=True, softmax_scale=scale)


def test_varlen_empty_q_reports_the_packed_shape():
    q = torch.empty(0, 4, 64, dtype=torch.bfloat16, device=DEVICE)
    k = torch.randn(5, 2, 64, dtype=torch.bfloat16, device=DEVICE)
    with pytest.raises(ValueError, match=r"total_q 0, shape \(0, 4, 64\)"):
        zyfa.flash_attn_varlen_func(q, k, k, torch.tensor([0, 0], dtype=torch.int32),
                                    torch.tensor([0, 5], dtype=torch.int32))


@pytest.mark.parametrize("quantizer", [zyfa.quantize_fp8, zyfa.quantize_int8_qk])
def test_quantizers_check_their_inputs(quantizer):
    q, k, v = (t.float() for t in _qkv())
    for args, word in [((q[:, :0], k, v), "q is empty"), ((q, k[:, :0], v[:, :0]), "k is empty"),
                       ((q, k, v[:, :5]), "k and v must agree"), ((q, k[..., :32], v), "same head_dim"),
                       ((q, k[:1], v[:1]), "same batch size"), ((q[0], k, v), "q must be 4-D")]:
        with pytest.raises(ValueError, match=word):
            quantizer(*args)


def test_quantize_fp8_varlen_descales_per_sequence():
    """Per-sequence descales in flash_attn_varlen_func's shape (batch, kv_heads): each from its own
    sequence, so a loud sequence leaves a quiet one's scale alone; the result equals quantize_fp8
    on each sequence."""
    lens = [7, 30]
    g = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(37, h, 64, generator=g) for h in (4, 2, 2))
    k[7:] *= 100
    cu = torch.tensor([0, 7, 37], dtype=torch.int32)
    x = zyfa.quantize_fp8_varlen(q, k, v, cu, cu)
    assert x.k_descale.shape == (2, 2) and x.q_descale.shape == (2, 2) and x.v_descale.shape == (2, 2)
    one = zyfa.quantize_fp8(q[None, :7], k[None, :7], v[None, :7])
    assert torch.equal(x.k_descale[:1], one.k_descale) and torch.equal(x.k.view(torch.uint8)[:7], one.k[0].view(torch.uint8))
    assert x.k_descale[1].min() > 50 * x.k_descale[0].max()
    with pytest.raises(ValueError, match="cu_seqlens_k"):
        zyfa.quantize_fp8_varlen(q, k, v, cu, torch.tensor([0, 37], dtype=torch.int32))
    with pytest.raises(ValueError, match="granularity"):
        zyfa.quantize_fp8_varlen(q, k, v, cu, cu, granularity="fine")


def test_gather_sequence_without_a_process_group():
    from zyfa.context_parallel import gather_sequence
    with pytest.raises(RuntimeError, match="gather_sequence needs torch.distributed"):
        gather_sequence(torch.zeros(1, 4, 2, 64))
