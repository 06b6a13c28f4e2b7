"""The custom op (opcheck, torch.compile, CUDA graphs) and the transformers backends."""
import logging

import pytest
import torch

import zyfa
from zyfa.activations import make
from zyfa.spec.reference import attention_fp64

from conftest import DEVICE, gpu, rel_err

OP = torch.ops.zyfa.flash_attn.default


def _inputs(seed=1, S=64):
    q, k, v = make("realistic", 1, S, 4, 2, 64, seed=seed, device=DEVICE)
    return q, k, v, zyfa.quantize_fp8(q, k, v)


@pytest.mark.slow
def test_opcheck_bf16_and_fp8():
    q, k, v, x = _inputs()
    torch.library.opcheck(OP, (q, k, v, None, True, None, None, None, "lean_cubic", "block", "triton"))
    # test_schema compares FP8 tensors with allclose, which torch does not implement for float8
    torch.library.opcheck(OP, (x.q, x.k, x.v, 0.1, True, x.q_descale, x.k_descale, x.v_descale,
                               "lean_cubic", "block", "triton"),
                          test_utils=("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"))


def test_eager_calls_skip_the_op_with_its_results(monkeypatch):
    q, k, v, x = _inputs()
    expected = [OP(q, k, v, None, True, None, None, None, "exact", "block", "reference"),
                OP(x.q, x.k, x.v, None, True, x.q_descale, x.k_descale, x.v_descale, "exact", "block", "reference")]

    def no_op(*args):
        raise AssertionError("an eager call without autograd went through the custom op")

    monkeypatch.setattr(zyfa.api, "flash_attn_op", no_op)
    got = [zyfa.flash_attn_func(q, k, v, causal=True, return_lse=True, backend="reference"),
           zyfa.flash_attn_func(causal=True, **x.kwargs(), return_lse=True, backend="reference")]
    for (o, lse), (eo, else_) in zip(got, expected):
        assert torch.equal(o, eo) and torch.equal(lse, else_)
    with pytest.raises(AssertionError, match="custom op"):       # autograd records the op
        zyfa.flash_attn_func(q.clone().requires_grad_(), k, v, causal=True, backend="reference")
    monkeypatch.undo()

    def no_backend(*args):
        raise AssertionError("fake tensors reached a backend")

    monkeypatch.setattr(zyfa.api, "run_backend", no_backend)
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:                                # fake tensors: the op's fake implementation
        fq, fk, fv = (mode.from_tensor(t) for t in (q, k, v))
        out, lse = zyfa.flash_attn_func(fq, fk, fv, causal=True, return_lse=True, backend="reference")
    assert out.shape == q.shape and lse.shape == (q.shape[0], q.shape[2], q.shape[1])


@pytest.mark.slow
def test_compile_fullgraph_matches_eager():
    q, k, v, x = _inputs(seed=2)

    def block(q, k, v, q8, k8, v8, qd, kd, vd):
        o = zyfa.flash_attn_func(q * 0.5, k, v, causal=True)
        o8, lse = zyfa.flash_attn_func(q8, k8, v8, causal=True, q_descale=qd, k_descale=kd, v_descale=vd, return_lse=True)
        return o.float() + o8.float(), lse

    args = (q, k, v, x.q, x.k, x.v, x.q_descale, x.k_descale, x.v_descale)
    eager = block(*args)
    compiled = torch.compile(block, fullgraph=True)(*args)
    for e, c in zip(eager, compiled):
        assert torch.equal(e, c)


@gpu
def test_cuda_graph_capture_replays_eager():
    q, k, v, x = _inputs(seed=3, S=1000)
    static = [t.clone() for t in (q, k, v)]
    torch.cuda.synchronize()
    zyfa.flash_attn_func(*static, causal=True)                                  # compile outside the capture
    zyfa.flash_attn_func(causal=True, **x.kwargs())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = zyfa.flash_attn_func(*static, causal=True)
        out8 = zyfa.flash_attn_func(causal=True, **x.kwargs())
    q2, k2, v2, x2 = _inputs(seed=4, S=1000)
    for s, t in zip(static, (q2, k2, v2)):
        s.copy_(t)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, zyfa.flash_attn_func(q2, k2, v2, causal=True))
    assert torch.equal(out8, zyfa.flash_attn_func(causal=True, **x.kwargs()))


@gpu
@pytest.mark.parametrize("quantize", ["quantize_int8_qk", "quantize_fp8"])
def test_cuda_graph_capture_of_the_quantizer_and_its_call(quantize):
    """The FP8 modes with their quantizer inside the graph (16-bit q, k, v in, output out): a
    serving loop captures the whole step, so no launch may read host memory or synchronize."""
    static = [t.clone() for t in make("realistic", 2, 1000, 8, 2, 128, seed=8, device=DEVICE)]

    def step():
        return zyfa.flash_attn_func(causal=True, **getattr(zyfa, quantize)(*static).kwargs())
    step()                                                                      # compile outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = step()
    for s, t in zip(static, make("realistic", 2, 1000, 8, 2, 128, seed=9, device=DEVICE)):
        s.copy_(t)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, step())


def _eager_then_captured(B, S, Hq, Hkv, D, seed):
    """Static inputs, flash_attn_func's eager output on them, and a CUDA graph of the same call
    with its output tensor."""
    static = [t.clone() for t in make("realistic", B, S, Hq, Hkv, D, seed=seed, device=DEVICE)]
    eager = zyfa.flash_attn_func(*static, causal=True)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = zyfa.flash_attn_func(*static, causal=True)
    return static, eager, g, out


@gpu
def test_cuda_graph_capture_of_a_short_dense_batch():
    """A dense 16-bit batch with few keys runs eagerly on the packed kernel (kernels.PACKED_ROUTE_KEYS),
    whose tile list a capture would copy from pinned host words; captured, it takes the dense kernel
    (same bits), so the graph holds no copy from a host buffer."""
    static, eager, g, out = _eager_then_captured(3, 300, 4, 2, 64, seed=5)
    q2, k2, v2 = make("realistic", 3, 300, 4, 2, 64, seed=6, device=DEVICE)
    for s, t in zip(static, (q2, k2, v2)):
        s.copy_(t)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, zyfa.flash_attn_func(q2, k2, v2, causal=True))
    assert not torch.equal(out, eager)


@gpu
def test_cuda_graph_capture_loads_a_kernel_first_needed_there():
    """Eagerly a short dense call runs on the packed kernel; captured, on the dense kernel, which
    is then loaded inside the capture (the loader must not synchronize the capturing stream)."""
    from zyfa.asm.ptx import kernels
    kernels._attention_16.cache_clear()                            # no kernel loaded by earlier tests
    _, eager, g, out = _eager_then_captured(2, 200, 4, 4, 128, seed=7)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)


# ------------------------------------------------------------------ transformers
transformers = pytest.importorskip("transformers")
from zyfa.integrations import transformers as zt  # noqa: E402


def _fp64_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kw):
    """Reference attention in float64 for the logits baseline: causal where transformers passes
    no mask, else the mask it passes (a sliding layer's window comes as one)."""
    if attention_mask is None:
        out = attention_fp64(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                             causal=True, softmax_scale=scaling)
        return out.to(query.dtype), None
    group = query.shape[1] // key.shape[1]
    k, v = (t.double().repeat_interleave(group, dim=1) for t in (key, value))
    s = query.double() @ k.transpose(-1, -2) * scaling
    s = s.masked_fill(~attention_mask, float("-inf")) if attention_mask.dtype == torch.bool else s + attention_mask
    return (s.softmax(-1) @ v).transpose(1, 2).to(query.dtype), None


def _fakequant_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kw):
    """The same E4M3 quantization as zyfa_fp8, then float64 attention: the FP8 input baseline."""
    x = zyfa.quantize_fp8(*(t.transpose(1, 2) for t in (query, key, value)))
    out = attention_fp64(*x.dequantized(), causal=True, softmax_scale=scaling)
    return out.to(query.dtype), None


def _register():
    zt.register()
    zt.register_backend("fp64_ref", _fp64_attention)
    zt.register_backend("fakequant_fp8", _fakequant_attention)


def _tiny(arch):
    common = dict(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=512)
    if arch == "llama":
        return transformers.LlamaConfig(**common)
    return transformers.Qwen3Config(**common)


def _logits(model, impl, ids, **kw):
    model.set_attn_implementation(impl)
    with torch.no_grad():
        return model(ids, **kw).logits.double()


def _kl(ref, out):
    """Mean over tokens of KL(softmax(ref) || softmax(out))."""
    lp, lq = ref.log_softmax(-1), out.log_softmax(-1)
    return (lp.exp() * (lp - lq)).sum(-1).mean().item()


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def tiny_model(request):
    _register()
    torch.manual_seed(0)
    cfg = _tiny(request.param)
    cfg.initializer_range = 0.2     # sharper attention than the default 0.02, so errors show in the logits
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="zyfa", dtype=torch.bfloat16)
    return model.to(DEVICE).eval()


def test_from_config_selects_zyfa(tiny_model):
    assert tiny_model.config._attn_implementation in zt.NAMES


@pytest.mark.slow
def test_bf16_logits_match_sdpa(tiny_model):
    ids = torch.randint(0, 256, (2, 80), generator=torch.Generator().manual_seed(5)).to(DEVICE)
    ref = _logits(tiny_model, "fp64_ref", ids)
    err_sdpa = rel_err(_logits(tiny_model, "sdpa", ids), ref)
    err_zyfa = rel_err(_logits(tiny_model, "zyfa", ids), ref)
    assert err_zyfa <= 2 * err_sdpa + 1e-3, f"zyfa logits err {err_zyfa:.3e}, sdpa {err_sdpa:.3e}"


@pytest.mark.slow
def test_fp8_kl_bounded_by_quantization(tiny_model):
    ids = torch.randint(0, 256, (1, 96), generator=torch.Generator().manual_seed(6)).to(DEVICE)
    ref = _logits(tiny_model, "fp64_ref", ids)
    kl_quant = _kl(ref, _logits(tiny_model, "fakequant_fp8", ids))
    kl_zyfa = _kl(ref, _logits(tiny_model, "zyfa_fp8", ids))
    assert kl_quant > 0
    assert kl_zyfa <= 2 * kl_quant + 1e-6, f"KL zyfa_fp8 {kl_zyfa:.3e}, FP8 inputs alone {kl_quant:.3e}"


@pytest.mark.slow
def test_int8_mode_cuts_the_fp8_kl(tiny_model):
    """zyfa_int8 (int8 q and k after rotation): KL from float64 attention well below zyfa_fp8's
    (measured 0.18-0.56x on these models, seeds 6-8)."""
    ids = torch.randint(0, 256, (1, 96), generator=torch.Generator().manual_seed(6)).to(DEVICE)
    ref = _logits(tiny_model, "fp64_ref", ids)
    kl_fp8, kl_int8 = (_kl(ref, _logits(tiny_model, impl, ids)) for impl in ("zyfa_fp8", "zyfa_int8"))
    assert kl_int8 <= 0.7 * kl_fp8, f"KL zyfa_int8 {kl_int8:.3e}, zyfa_fp8 {kl_fp8:.3e}"


def _padded_batch(side):
    """Two prompts (40 and 27 tokens) padded to one batch on ``side``: ids, mask, position_ids, prompts."""
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(0, 256, (n,), generator=g) for n in (40, 27)]
    ids, mask = torch.zeros(2, 40, dtype=torch.long), torch.zeros(2, 40, dtype=torch.long)
    for b, p in enumerate(prompts):
        sl = slice(40 - len(p), 40) if side == "left" else slice(0, len(p))
        ids[b, sl], mask[b, sl] = p, 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids.to(DEVICE), mask.to(DEVICE), pos.to(DEVICE), [p.to(DEVICE) for p in prompts]


@pytest.mark.slow
@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_batch_runs_varlen_per_sequence(tiny_model, caplog, side):
    """A padded batch runs through flash_attn_varlen_func (no SDPA fallback but for zyfa_int8,
    which says so): each prompt's logits
    are as close to float64 attention on that prompt alone as SDPA's own (BF16), or as the FP8
    quantization alone allows (zyfa_fp8), and as close to zyfa on the prompt alone."""
    ids, mask, pos, prompts = _padded_batch(side)
    zt._logged.clear()
    with caplog.at_level(logging.WARNING, logger="zyfa"):
        padded = {impl: _logits(tiny_model, impl, ids, attention_mask=mask, position_ids=pos)
                  for impl in ("zyfa", "zyfa_fp8")}
    assert not [r.message for r in caplog.records if "falling back" in r.message]
    with caplog.at_level(logging.WARNING, logger="zyfa"):    # the INT8 mode's per-token scales: SDPA, said once
        _logits(tiny_model, "zyfa_int8", ids, attention_mask=mask, position_ids=pos)
    assert sum("INT8 mode" in r.message for r in caplog.records) == 1
    for b, p in enumerate(prompts):
        rows = mask[b].bool()
        ref = _logits(tiny_model, "fp64_ref", p[None])[0]
        err_sdpa = rel_err(_logits(tiny_model, "sdpa", p[None])[0], ref)
        for got in (padded["zyfa"][b, rows], _logits(tiny_model, "zyfa", p[None])[0]):
            assert rel_err(got, ref) <= 2 * err_sdpa + 1e-3, (b, rel_err(got, ref), err_sdpa)
        assert rel_err(padded["zyfa"][b, rows], _logits(tiny_model, "zyfa", p[None])[0]) <= 2 * err_sdpa + 1e-3
        kl_quant = _kl(ref, _logits(tiny_model, "fakequant_fp8", p[None])[0])
        kl_zyfa = _kl(ref, padded["zyfa_fp8"][b, rows])
        assert kl_zyfa <= 2 * kl_quant + 1e-6, (b, kl_zyfa, kl_quant)


@pytest.mark.slow
def test_sliding_window_runs_on_zyfa_and_custom_masks_fall_back(tiny_model, caplog):
    from transformers.masking_utils import sdpa_mask, sliding_window_causal_mask_function
    ids, mask, _, _ = _padded_batch("right")
    padding = sdpa_mask(2, 40, 40, attention_mask=mask.bool(), device=DEVICE)
    window = sdpa_mask(2, 40, 40, mask_function=sliding_window_causal_mask_function(8), attention_mask=mask.bool(),
                       device=DEVICE)
    assert zt._mask_layout(padding, 40, -1) is not None and zt._mask_layout(window, 40, -1) is None
    assert zt._mask_layout(window, 40, 7) is not None           # transformers' window 8: FlashAttention's left 7
    zt._logged.clear()
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4, 40, 64, generator=g).to(DEVICE, torch.bfloat16)
    kv = torch.randn(2, 2, 40, 64, generator=g).to(DEVICE, torch.bfloat16)
    module = torch.nn.Module()
    module.is_causal, module.num_key_value_groups = True, 2
    with caplog.at_level(logging.WARNING, logger="zyfa"):
        out, _ = zt.attention_forward(module, q, kv, kv, window, scaling=0.125, sliding_window=8)
    assert not [r.message for r in caplog.records if "falling back" in r.message]
    valid = mask.bool()
    for b in range(2):
        n = int(valid[b].sum())
        ref = attention_fp64(q[b:b + 1, :, :n].transpose(1, 2), kv[b:b + 1, :, :n].transpose(1, 2),
                             kv[b:b + 1, :, :n].transpose(1, 2), causal=True, window_size=(7, 0), softmax_scale=0.125)
        assert rel_err(out[b:b + 1, :n], ref) < 1e-2
        assert not out[b, n:].any()                                 # padded rows: zeros
    custom = window.clone()
    custom[0, 0, 5, 1] = ~custom[0, 0, 5, 1]
    with caplog.at_level(logging.WARNING, logger="zyfa"):
        zt.attention_forward(module, q, kv, kv, custom, scaling=0.125, sliding_window=8)
    assert sum("other than causal" in r.message for r in caplog.records) == 1
    assert all(r.name == "zyfa" and r.levelno == logging.WARNING for r in caplog.records if "falling back" in r.message)


def _cache_model(kind):
    common = dict(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=512,
                  initializer_range=0.2)
    if kind == "gemma3":           # a sliding layer and a full one: the hybrid cache
        cfg = transformers.Gemma3TextConfig(**common, sliding_window=16,
                                            layer_types=["sliding_attention", "full_attention"])
    elif kind == "mistral":        # every layer sliding
        cfg = transformers.MistralConfig(**common, sliding_window=16)
    elif kind == "qwen3":
        cfg = transformers.Qwen3Config(**common)
    else:
        cfg = transformers.LlamaConfig(**common)
    torch.manual_seed(1)
    return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa",
                                                         dtype=torch.bfloat16).to(DEVICE).eval()


def _left_padded_prompts():
    """Two 40-token prompts, the first left-padded by 11: ids and attention mask."""
    g = torch.Generator().manual_seed(9)
    ids = torch.randint(1, 256, (2, 40), generator=g).to(DEVICE)
    mask = torch.ones_like(ids)
    mask[0, :11] = 0
    return ids, mask


def _logit_noise(model, ids):
    """How far the BF16 model's logits move when only its attention rounds differently: the
    largest |SDPA - float64 attention| over an unpadded prompt's logits (the rest of the model
    BF16 in both). The baseline that greedy decoding's near ties and the step logits are held to."""
    out = {}
    with torch.no_grad():
        for impl in ("sdpa", "fp64_ref"):
            model.set_attn_implementation(impl)
            out[impl] = model(ids).logits.double()
    model.set_attn_implementation("sdpa")
    return float((out["sdpa"] - out["fp64_ref"]).abs().max())


def _assert_same_greedy_tokens(got, want, prompt_len, noise):
    """Greedy tokens equal, but where SDPA's own top two logits at the first differing step are
    within 2 x ``noise`` (a near tie that rounding may break either way); until then each step's
    logits within 2 x ``noise`` of SDPA's."""
    for b in range(got.sequences.shape[0]):
        diff = (got.sequences[b, prompt_len:] != want.sequences[b, prompt_len:]).nonzero()
        steps = int(diff[0]) if len(diff) else len(want.scores)
        for t in range(steps):
            d = float((got.scores[t][b].double() - want.scores[t][b].double()).abs().max())
            assert d <= 2 * noise, (b, t, d, noise)
        if len(diff):
            t, w, g = steps, want.sequences[b, prompt_len + steps], got.sequences[b, prompt_len + steps]
            gap = float(want.scores[t][b, w] - want.scores[t][b, g])
            assert gap <= 2 * noise, (b, t, gap, noise, got.sequences[:, prompt_len:], want.sequences[:, prompt_len:])


@pytest.mark.parametrize("kind,cache", [("llama", "dynamic"), ("llama", "static"), ("qwen3", "dynamic"),
                                        ("qwen3", "static"), ("gemma3", "dynamic"), ("gemma3", "static"),
                                        ("mistral", "dynamic")])
@pytest.mark.slow
def test_generate_with_every_cache_matches_sdpa(kind, cache, caplog):
    """Greedy tokens of a left-padded batch (40-token prompts, 20 new tokens) equal SDPA's with a
    DynamicCache, a StaticCache (its free slots after the queries) and the sliding/hybrid caches of
    sliding-window layers. Nothing falls back to SDPA: spies count the prefill's varlen calls (with
    the window of sliding layers) and a decode-kernel call a layer a step after the first token,
    a full-attention layer's keys of the padded sequence starting past its padding."""
    _register()
    model = _cache_model(kind)
    ids, mask = _left_padded_prompts()
    new = 20
    kw = dict(attention_mask=mask, max_new_tokens=new, do_sample=False, pad_token_id=0)
    if cache == "static":
        kw["cache_implementation"] = "static"
    kw.update(output_scores=True, return_dict_in_generate=True)
    with torch.no_grad():
        res = model.generate(ids, **kw)
    noise = _logit_noise(model, ids[1:2])           # the unpadded prompt
    windows, leftpads = [], []
    real, real_decode = zyfa.flash_attn_varlen_func, zyfa.flash_attn_with_kvcache

    def spy(*a, **k):
        windows.append(k.get("window_size"))
        return real(*a, **k)

    def decode_spy(*a, **k):
        leftpads.append(k.get("cache_leftpad"))
        return real_decode(*a, **k)
    model.set_attn_implementation("zyfa")
    zt._logged.clear()
    with caplog.at_level(logging.WARNING, logger="zyfa"), pytest.MonkeyPatch.context() as mp:
        mp.setattr(zyfa, "flash_attn_varlen_func", spy)
        mp.setattr(zyfa, "flash_attn_with_kvcache", decode_spy)
        with torch.no_grad():
            got = model.generate(ids, **kw)
    _assert_same_greedy_tokens(got, res, 40, noise)
    fallbacks = [r.message for r in caplog.records if "falling back" in r.message]
    assert not fallbacks, fallbacks
    expected = {"gemma3": [(15, 0), (-1, 0)], "mistral": [(15, 0)] * 2}.get(kind, [(-1, 0)] * 2)
    assert windows == expected, windows
    assert len(leftpads) == 2 * (new - 1), len(leftpads)
    # a full-attention layer's keys start past the padding; a sliding layer's window hides it
    full_layers = {"gemma3": 1, "mistral": 0}.get(kind, 2)
    padded = sum(p is not None and int(p[0]) >= 11 and int(p[1]) == 0 for p in leftpads)
    assert padded == full_layers * (new - 1), leftpads


@pytest.mark.slow
def test_backends_run_zyfa(tiny_model, monkeypatch):
    """The backends really call zyfa (one call a layer, FP8 / int8 inputs for zyfa_fp8 / zyfa_int8, the model's
    scaling passed on, here one that is not 1/sqrt(head_dim)) on a plain causal prefill; a spy counts the calls."""
    calls = []
    real = zyfa.flash_attn_func

    def spy(*args, **kw):
        q = kw.get("q", args[0] if args else None)
        calls.append((q.dtype, kw.get("softmax_scale"), kw.get("causal"), kw.get("ref_rule")))
        return real(*args, **kw)

    monkeypatch.setattr(zyfa, "flash_attn_func", spy)
    ids = torch.randint(0, 256, (1, 48), generator=torch.Generator().manual_seed(8)).to(DEVICE)
    layers = tiny_model.config.num_hidden_layers
    scaling = 0.37 * tiny_model.config.head_dim ** -0.5      # not the default: the module's own is passed on
    for m in tiny_model.modules():
        if hasattr(m, "scaling") and hasattr(m, "head_dim"):
            monkeypatch.setattr(m, "scaling", scaling)
    # zyfa_fp8 runs the fast mode, zyfa_int8 the per-block fold
    for impl, dtype, ref in (("zyfa", torch.bfloat16, None), ("zyfa_fp8", torch.float8_e4m3fn, "running"),
                             ("zyfa_int8", torch.int8, "block")):
        calls.clear()
        _logits(tiny_model, impl, ids)
        assert calls == [(dtype, scaling, True, ref)] * layers, (impl, calls)


@pytest.mark.slow
def test_model_scaling_reaches_every_path(tiny_model):
    """A model whose attention scale is not 1/sqrt(head_dim) (Gemma's query_pre_attn_scalar,
    Granite's attention_multiplier): zyfa takes the scaling transformers passes on the plain
    causal path and the padded (varlen) path alike, so its logits stay as close to float64
    attention as SDPA's."""
    modules = [m for m in tiny_model.modules() if hasattr(m, "scaling") and hasattr(m, "head_dim")]
    assert modules
    saved = [m.scaling for m in modules]
    try:
        for m in modules:
            m.scaling = 0.37 * m.head_dim ** -0.5 * 8          # far from the default
        ids, mask, pos, _ = _padded_batch("left")
        for kw in ({}, dict(attention_mask=mask, position_ids=pos)):
            ref = _logits(tiny_model, "fp64_ref" if not kw else "sdpa", ids, **kw)
            if kw:                                              # padded: float64 attention takes no mask
                got, base = _logits(tiny_model, "zyfa", ids, **kw), ref
                rows = mask.bool()
                assert rel_err(got[rows], base[rows]) <= 2e-2, rel_err(got[rows], base[rows])
                continue
            err_sdpa = rel_err(_logits(tiny_model, "sdpa", ids), ref)
            err_zyfa = rel_err(_logits(tiny_model, "zyfa", ids), ref)
            assert err_zyfa <= 2 * err_sdpa + 1e-3, (err_zyfa, err_sdpa)
    finally:
        for m, s in zip(modules, saved):
            m.scaling = s


def _forced_logits(model, ids, mask, tokens, cache):
    """Next-token logits (steps, batch, vocab), float64, of a left-padded batch fed ``tokens``
    (batch, steps - 1) one a step after its prompt, with ``cache``: every cache sees the same
    path, so their distributions compare step by step."""
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    out = []
    with torch.no_grad():
        step = model(ids, attention_mask=mask, position_ids=pos, past_key_values=cache, use_cache=True)
        out.append(step.logits[:, -1].double())
        for t in range(tokens.shape[1]):
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], 1)
            pos = pos[:, -1:] + 1
            step = model(tokens[:, t:t + 1], attention_mask=mask, position_ids=pos, past_key_values=cache,
                         use_cache=True)
            out.append(step.logits[:, -1].double())
    return torch.stack(out)


def _fakequant_cache():
    """A BF16 cache holding what E4M3Cache holds, dequantized: the quantization alone."""
    from transformers.cache_utils import Cache, DynamicLayer
    from zyfa.quantize import quantize_tokens

    class Layer(DynamicLayer):
        def update(self, key_states, value_states, *args, **kwargs):
            deq = [(c.float() * d[..., None]).to(x.dtype) for x in (key_states, value_states)
                   for c, d in [quantize_tokens(x)]]
            return super().update(*deq, *args, **kwargs)
    return Cache(layer_class_to_replicate=Layer)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_e4m3_cache_decodes_in_place_with_the_quantization_error_alone(kind, caplog):
    """zyfa with an E4M3Cache: generation runs, every decode step reads the E4M3 codes (a spy),
    nothing falls back, the cache takes (d + 4) / 2d of a BF16 cache's bytes, and along the BF16
    run's greedy path the KL of its next-token distributions from the BF16 cache's is at most
    twice that of a BF16 cache holding the same quantized values (the quantization alone)."""
    from transformers.cache_utils import DynamicCache
    from zyfa.integrations.fp8_cache import E4M3Cache
    _register()
    model = _cache_model(kind)
    model.set_attn_implementation("zyfa")
    ids, mask = _left_padded_prompts()
    new = 20
    kw = dict(attention_mask=mask, max_new_tokens=new, do_sample=False, pad_token_id=0)
    dtypes = []
    real = zyfa.flash_attn_with_kvcache

    def spy(*a, **k):
        dtypes.append(a[1].dtype)
        return real(*a, **k)
    zt._logged.clear()
    cache = E4M3Cache()
    with caplog.at_level(logging.WARNING, logger="zyfa"), pytest.MonkeyPatch.context() as mp:
        mp.setattr(zyfa, "flash_attn_with_kvcache", spy)
        with torch.no_grad():
            got = model.generate(ids, past_key_values=cache, **kw)
    assert got.shape == (2, 40 + new)
    assert dtypes == [torch.float8_e4m3fn] * (2 * (new - 1)), dtypes
    assert not [r.message for r in caplog.records if "falling back" in r.message]
    layer = cache.layers[0]
    e4m3_bytes = sum(t.numel() * t.element_size() for t in (layer.keys, layer.key_descale))
    assert e4m3_bytes == layer.keys.numel() * (64 + 4) // 64 and layer.keys.dtype == torch.float8_e4m3fn

    with torch.no_grad():
        path = model.generate(ids, past_key_values=DynamicCache(), **kw)[:, 40:-1]
    ref = _forced_logits(model, ids, mask, path, DynamicCache())
    kl = {}
    for name, c in (("fake-quantized BF16 cache", _fakequant_cache()), ("E4M3Cache", E4M3Cache())):
        out = _forced_logits(model, ids, mask, path, c)
        kl[name] = _kl(ref, out)
    print(f"\n{kind}: KL from the BF16 cache's next-token distributions, {new} steps x 2 sequences: "
          + ", ".join(f"{n} {v:.3e}" for n, v in kl.items()))
    assert kl["fake-quantized BF16 cache"] > 0
    assert kl["E4M3Cache"] <= 2 * kl["fake-quantized BF16 cache"] + 1e-6, kl
