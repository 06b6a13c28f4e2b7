"""The INT8 Q.K^T mode (zyfa.quantize_int8_qk): int8 q and k, E4M3 v. The Triton kernel against
the spec, its end-to-end error against E4M3's, non-finite inputs, and the checks."""
import pytest
import torch

import zyfa
from conftest import DEVICE, HAS_GPU, describe_mismatch, rel_err
from zyfa.activations import make
from zyfa.spec.reference import attention_fp64, fp8_attention_spec


def _bf16(kind, S, Hq, Hkv, D, Dv=None, Sk=None, seed=3):
    return [t.bfloat16().to(DEVICE) for t in make(kind, 1, S, Hq, Hkv, D, Dv, seqlen_k=Sk or S, seed=seed)]


@pytest.mark.parametrize("dims", [(64, 64), (128, 128), (192, 128)], ids=["d64", "d128", "d192-128"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.slow
def test_triton_equals_the_spec(dims, causal):
    """Integer scores are exact on every path, so with a bit-exact P rule the Triton kernel
    gives the spec's P codes. Their row sums show it: LSE within a few float32 steps (one code
    off moves a row sum by >= 2^-13 of itself: hundreds of those steps). Outputs equal the spec's
    under the BF16 rounding up to float32 accumulation order on the CPU; on the GPU the FP8
    tensor cores keep ~14 bits of P.V's sums, which moves 3-4% of outputs (H200) by the
    rounding of sums that large: there the outputs' difference from the spec stays within 2^-8
    relative (BF16's own rounding is 2^-9.3 here), which a wrong key, block or head would exceed."""
    D, Dv = dims
    x = zyfa.quantize_int8_qk(*_bf16("realistic", 70, 4, 2, D, Dv, Sk=100))
    assert x.q.dtype == x.k.dtype == torch.int8 and x.v.dtype == torch.float8_e4m3fn
    out, lse = zyfa.flash_attn_func(**x.kwargs(), causal=causal, p_rule="lean_cubic", return_lse=True,
                                    backend="triton")
    block_n, fused = (32, False) if not HAS_GPU else (128, True)      # the interpreter's tiles and FMAs
    spec, spec_lse = fp8_attention_spec(**x.kwargs(), causal=causal, p_rule="lean_cubic", block_n=block_n,
                                        fused_fma=fused, return_lse=True)
    ulp = torch.finfo(torch.float32).eps * spec_lse.abs().max().item()
    assert (lse.double() - spec_lse).abs().max() <= 4 * ulp, (lse.double() - spec_lse).abs().max() / ulp
    spec16 = spec.to(out.dtype)
    differ = (out != spec16).float().mean()
    if not HAS_GPU:
        assert differ <= 0.001, describe_mismatch(out, spec16)
    else:
        assert differ <= 0.1 and rel_err(out, spec) <= 2 ** -8, (differ, rel_err(out, spec), rel_err(spec16, spec))


@pytest.mark.parametrize("shape", [(64, True, 40, 70), (128, False, 33, 50)], ids=["d64-causal", "d128-full"])
@pytest.mark.parametrize("scale", [1e-3, 1.0, 30.0])
def test_triton_takes_the_specs_grid(shape, scale):
    """The grid fold (spec.int8_grid) in Triton: factors from ~1e-8 to ~1 (softmax_scale times
    ``scale``), the spec's P codes, shown by the LSE as in test_triton_equals_the_spec."""
    D, causal, Sq, Sk = shape
    x = zyfa.quantize_int8_qk(*_bf16("realistic", Sq, 2, 1, D, Sk=Sk, seed=5))
    softmax_scale = scale / D ** 0.5
    out, lse = zyfa.flash_attn_func(**x.kwargs(), causal=causal, softmax_scale=softmax_scale, p_rule="lean_cubic",
                                    return_lse=True, backend="triton")
    block_n, fused = (32, False) if not HAS_GPU else (128, True)
    spec, spec_lse = fp8_attention_spec(**x.kwargs(), causal=causal, softmax_scale=softmax_scale,
                                        p_rule="lean_cubic", block_n=block_n, fused_fma=fused, return_lse=True)
    ulp = torch.finfo(torch.float32).eps * spec_lse.abs().max().item()
    assert (lse.double() - spec_lse).abs().max() <= 4 * ulp, (lse.double() - spec_lse).abs().max() / ulp
    assert rel_err(out, spec) <= 2 ** -8


@pytest.mark.parametrize("kind, bound", [("realistic", 0.5), ("gaussian", 0.85)])
@pytest.mark.slow
def test_cuts_the_end_to_end_error(kind, bound):
    """Against float64 on the BF16 inputs (the spec as the kernel): INT8 Q.K^T after rotation
    and smoothing has under half the error of per-head E4M3 on these inputs with outlier
    channels (0.38x measured on the CPU) and less on Gaussian ones (0.74x), where what is left
    is E4M3's rounding of V and P."""
    q, k, v = _bf16(kind, 512, 8, 2, 128)
    ref = attention_fp64(q, k, v)
    e4m3 = rel_err(zyfa.flash_attn_func(causal=True, **zyfa.quantize_fp8(q, k, v).kwargs(), backend="reference"), ref)
    int8 = rel_err(zyfa.flash_attn_func(causal=True, **zyfa.quantize_int8_qk(q, k, v).kwargs(), backend="reference"), ref)
    assert int8 <= bound * e4m3, (int8, e4m3)


@pytest.mark.parametrize("backend", ["reference", "triton"])
@pytest.mark.parametrize("where", ["q", "k", "k, key_block 16"])
def test_a_nonfinite_element_reaches_only_the_rows_that_see_it(backend, where):
    """int8 has no NaN: the descale of the token (q) or key block (k) carries it. Sq 48 over
    Sk 80: query row i sees keys <= i + 32; a NaN in query row 20 of head 2 reaches that row
    alone; one in key 60 of kv head 1 reaches heads 2 and 3 in every row that sees its block:
    all rows with blocks of 128 keys (one descale a block), rows 28.. with blocks of 16 (then
    one descale a key, NaN for that key only)."""
    q, k, v = _bf16("realistic", 48, 4, 2, 64, Sk=80)
    if where == "q":
        q[0, 20, 2, 7] = float("nan")
    else:
        k[0, 60, 1, 7] = float("nan")
    key_block = 16 if where.endswith("16") else 128
    out = zyfa.flash_attn_func(causal=True, **zyfa.quantize_int8_qk(q, k, v, key_block=key_block).kwargs(), backend=backend).float()
    bad = ~torch.isfinite(out).all(-1)
    sees = torch.zeros_like(bad)
    if where == "q":
        sees[0, 20, 2] = True
    else:
        sees[0, 28 if key_block == 16 else 0:, 2:4] = True
    assert torch.equal(bad, sees), torch.nonzero(bad != sees).tolist()


def test_checks():
    q, k, v = _bf16("gaussian", 16, 2, 1, 64)
    x = zyfa.quantize_int8_qk(q, k, v)
    with pytest.raises(TypeError, match="int8 q and k with float8_e4m3fn v"):
        zyfa.flash_attn_func(x.q, k, v, causal=True, q_descale=x.q_descale, k_descale=x.k_descale, v_descale=x.v_descale)
    with pytest.raises(TypeError, match="int8 q and k with float8_e4m3fn v"):
        zyfa.flash_attn_func(x.q, x.k, x.k, causal=True, q_descale=x.q_descale, k_descale=x.k_descale, v_descale=x.v_descale)
    with pytest.raises(ValueError, match="key_block"):
        zyfa.quantize_int8_qk(q, k, v, key_block=0)
    # the generated kernels say why they do not take it
    from zyfa import dispatch
    from zyfa.asm.limits import fp8_refusal
    p = dispatch.Problem(device=torch.device("cuda"), arch="sm90", is_fp8=True, head_dims=(128, 128), causal=True,
                         seqlen_q=16, seqlen_k=16, p_rule="exact", ref_rule="block", int8_qk=True)
    ok, why = fp8_refusal(p, "generated kernel", True, "128", ("exact",), ("block",))
    assert not ok and "INT8" in why
    # a coarse descale must still be finite (checked on CPU tensors only: no device sync), a
    # per-token one may carry NaN
    cpu = {name: t.cpu() for name, t in x.kwargs().items()}
    with pytest.raises(ValueError, match="v_descale holds NaN"):
        zyfa.flash_attn_func(causal=True, **{**cpu, "v_descale": cpu["v_descale"] * float("nan")})


def test_scales_map_each_token_and_key_block_to_the_int8_range():
    """q: each token's (and head's) largest |value| becomes 127; k: each 128-key block's (and kv
    head's); dequantized, both stay within half a step of the rotated, smoothed inputs."""
    q, k, v = _bf16("realistic", 300, 4, 2, 64)
    x = zyfa.quantize_int8_qk(q, k, v)
    assert (x.q.abs().amax(-1) == 127).all()
    k_blocks = torch.nn.functional.pad(x.k.abs().amax(-1), (0, 0, 0, 84)).reshape(1, 3, 128, 2).amax(2)
    assert (k_blocks == 127).all()
    from zyfa.quantize import rotate, smooth_mean
    qf, kf = rotate(q.float(), 0), rotate((k.float() - smooth_mean(k.float())), 0)
    dq = x.q.double() * x.q_descale.permute(0, 2, 1)[..., None].double()
    assert x.k_descale.shape == (1, 2, 3)                          # one a block of 128 keys
    kd = x.k_descale.repeat_interleave(128, -1)[..., :300].permute(0, 2, 1)[..., None].double()
    dk = x.k.double() * kd
    assert ((dq - qf.double()).abs() <= 0.5 * x.q_descale.permute(0, 2, 1)[..., None].double() + 1e-7).all()
    assert ((dk - kf.double()).abs() <= 0.5 * kd + 1e-7).all()


def test_k_descales_a_key_block_mean_their_keys_descales():
    """k_descale (B, Hkv, ceil(Sk / 128)): each block's descale stands for its keys', so the
    spec gives the same bits as with the per-token descales that repeat it; any other last
    dimension is refused, naming both shapes."""
    q, k, v = _bf16("realistic", 40, 4, 2, 64, Sk=300)
    x = zyfa.quantize_int8_qk(q, k, v)
    assert x.k_descale.shape == (1, 2, 3)
    per_token = x.k_descale.repeat_interleave(128, -1)[..., :300].contiguous()
    a = fp8_attention_spec(**x.kwargs(), p_rule="lean_cubic")
    b = fp8_attention_spec(**{**x.kwargs(), "k_descale": per_token}, p_rule="lean_cubic")
    assert torch.equal(a, b)
    with pytest.raises(ValueError, match=r"\(1, 2, 300\) or \(1, 2, 3\) \(a block of 128 keys\)"):
        zyfa.flash_attn_func(causal=True, **{**x.kwargs(), "k_descale": x.k_descale[..., :2]})
    with pytest.raises(ValueError, match="q_descale has shape"):        # q takes no block form
        zyfa.flash_attn_func(causal=True, **{**x.kwargs(), "q_descale": x.q_descale[..., :1].expand(1, 4, 3).contiguous()})


def test_generated_kernel_takes_k_descales_a_block_or_coarser(monkeypatch):
    """The dispatcher's view of the generated INT8 kernel (the GPU tests run it:
    tests/ptx/test_ptx_int8.py): head dims 64, 128, MLA's 192 / 128 and 256, k descales a key
    block or coarser, any q descales; per-key k descales and other head dims go elsewhere,
    saying why."""
    from zyfa import dispatch
    from zyfa.asm.ptx import backend as ptx
    base = dict(device=torch.device("cuda"), arch="sm90", is_fp8=True, causal=True, seqlen_q=16, seqlen_k=300,
                p_rule="exact", ref_rule="block", int8_qk=True, per_token_descales=True)
    monkeypatch.setattr(ptx, "HAS_CUDA_PYTHON", True)     # what it needs to load a kernel, not to decide
    for dims in ((64, 64), (128, 128), (192, 128), (256, 256)):
        assert ptx.supports(dispatch.Problem(head_dims=dims, **base))[0], dims
    ok, why = ptx.supports(dispatch.Problem(head_dims=(128, 128), k_descale_per_key=True, **base))
    assert not ok and "a block of 128 keys" in why
    ok, why = ptx.supports(dispatch.Problem(head_dims=(96, 96), **base))
    assert not ok and "(192, 128) or (256, 256)" in why and "(96, 96)" in why
    ok, why = ptx.supports(dispatch.Problem(head_dims=(128, 128), packed=True, **base))
    assert not ok and "dense" in why


def test_call_tells_the_dispatcher_whether_k_descales_are_per_key(monkeypatch):
    """flash_attn_func and flash_attn_varlen_func pass the INT8 mode and k's descale form to
    the dispatcher (varlen once dispatched int8 q and k as E4M3 to a generated FP8 kernel;
    its packed launch now goes to the Triton kernel, which reads int8)."""
    from zyfa import dispatch
    seen = []
    real = dispatch.select
    monkeypatch.setattr(dispatch, "select", lambda p, requested="auto": seen.append(p) or real(p, requested))
    q, k, v = _bf16("realistic", 40, 4, 2, 64, Sk=300)
    x = zyfa.quantize_int8_qk(q, k, v)
    zyfa.flash_attn_func(causal=True, **x.kwargs(), backend="reference")
    y = zyfa.quantize_int8_qk(q, k, v, key_block=16)
    zyfa.flash_attn_func(causal=True, **y.kwargs(), backend="reference")
    assert [(p.int8_qk, p.k_descale_per_key) for p in seen] == [(True, False), (True, True)]
    seen.clear()
    cu_q, cu_k = (torch.tensor([0, n], dtype=torch.int32, device=q.device) for n in (40, 300))
    ones = torch.ones(1, 2, device=q.device)           # varlen: descales a (sequence, kv head)
    zyfa.flash_attn_varlen_func(x.q[0], x.k[0], x.v[0], cu_q, cu_k, 40, 300, causal=True, q_descale=ones, k_descale=ones,
                                v_descale=ones, backend="reference")
    assert seen and seen[0].int8_qk and seen[0].packed


@pytest.mark.slow
def test_varlen_int8_equals_the_spec_per_sequence():
    """A packed batch of int8 q and k (descales a sequence and kv head) on the default path:
    each sequence's rows are the spec's for that sequence alone, within 2^-8 relative (the
    BF16 rounding, and on a GPU the FP8 tensor cores' P.V sums, as in test_triton_equals_the_spec)."""
    lens = [1, 70, 130]
    q, k, v = _bf16("realistic", sum(lens), 4, 2, 64)
    x = zyfa.quantize_fp8(q, k, v)                        # per-head descales, then q and k as int8 codes
    q8, k8 = (torch.clamp(t.float() * 8, -127, 127).round().to(torch.int8) for t in (x.q, x.k))
    n = len(lens)
    qd, kd, vd = (t.expand(n, -1).contiguous() for t in (x.q_descale / 8, x.k_descale / 8, x.v_descale))
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    block_n, fused = (32, False) if not HAS_GPU else (128, True)      # the interpreter's tiles and FMAs
    out = zyfa.flash_attn_varlen_func(q8[0], k8[0], x.v[0], cu, cu, max(lens), max(lens), causal=True, q_descale=qd,
                                      k_descale=kd, v_descale=vd)
    for i, (a, b) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
        spec = fp8_attention_spec(q8[:, a:b], k8[:, a:b], x.v[:, a:b], qd[i:i + 1], kd[i:i + 1], vd[i:i + 1],
                                  block_n=block_n, fused_fma=fused)
        assert rel_err(out[a:b][None], spec) <= 2.0 ** -8, (i, rel_err(out[a:b][None], spec))
