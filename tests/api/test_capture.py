"""zyfa.activations.capture on tiny randomly initialised transformers decoders."""
import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from zyfa.activations import capture, load_capture  # noqa: E402
from zyfa.spec.reference import attention_fp64  # noqa: E402

from conftest import rel_err  # noqa: E402

COMMON = dict(vocab_size=128, hidden_size=256, num_hidden_layers=2, max_position_embeddings=256)


def _config(arch):
    if arch == "llama":
        return transformers.LlamaConfig(**COMMON, intermediate_size=256, num_attention_heads=4,
                                        num_key_value_heads=2, head_dim=64)
    if arch == "qwen3":
        return transformers.Qwen3Config(**COMMON, intermediate_size=256, num_attention_heads=4,
                                        num_key_value_heads=2, head_dim=64)
    return transformers.DeepseekV2Config(**COMMON, intermediate_size=256, moe_intermediate_size=64,
                                         num_attention_heads=4, num_key_value_heads=4, q_lora_rank=None,
                                         kv_lora_rank=64, qk_nope_head_dim=128, qk_rope_head_dim=64,
                                         v_head_dim=128, n_routed_experts=4, num_experts_per_tok=2,
                                         n_shared_experts=1, first_k_dense_replace=1)


@pytest.mark.parametrize("arch,heads,dims", [("llama", (4, 2), (64, 64)), ("qwen3", (4, 2), (64, 64)),
                                             ("deepseek_v2", (4, 4), (192, 128))])
@pytest.mark.slow
def test_capture_records_what_attention_consumed(arch, heads, dims, tmp_path):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(_config(arch), attn_implementation="sdpa").eval()
    ids = torch.randint(0, 128, (2, 48), generator=torch.Generator().manual_seed(1))
    attn_out = {}
    hooks = [layer.self_attn.o_proj.register_forward_pre_hook(
        lambda mod, args, i=i: attn_out.__setitem__(i, args[0].detach()))
        for i, layer in enumerate(model.model.layers)]
    with torch.no_grad():
        before = model(ids).logits
    path = str(tmp_path / "acts.safetensors")
    got = capture(model, ids, layers=[0, 1], path=path)
    for h in hooks:
        h.remove()
    with torch.no_grad():
        assert torch.equal(model(ids).logits, before)            # capture left the model as it was
    assert model.config._attn_implementation == "sdpa"
    for c, again in zip(got, load_capture(path)):
        assert c.q.shape == (2, 48, heads[0], dims[0]) and c.k.shape == (2, 48, heads[1], dims[0])
        assert c.v.shape == (2, 48, heads[1], dims[1])
        assert all(torch.equal(getattr(c, t), getattr(again, t)) for t in "qkv")
        assert again.softmax_scale == c.softmax_scale
        # attention recomputed in float64 from the captured tensors is what the model fed o_proj
        layer = int(c.name.removeprefix("layer"))
        ours = attention_fp64(c.q, c.k, c.v, causal=True, softmax_scale=c.softmax_scale)
        assert rel_err(attn_out[layer].reshape(ours.shape), ours) < 1e-5


def test_capture_errors(tmp_path):
    model = transformers.AutoModelForCausalLM.from_config(_config("llama"), attn_implementation="sdpa")
    with pytest.raises(ValueError, match="were not reached"):
        capture(model, torch.zeros(1, 8, dtype=torch.long), layers=[5])
    with pytest.raises(ValueError, match="2-D"):
        capture(model, torch.zeros(8, dtype=torch.long))
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="cannot read"):
        load_capture(str(bad))
    from safetensors.torch import save_file
    save_file({"x": torch.zeros(2)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match="not a zyfa capture"):
        load_capture(str(tmp_path / "other.safetensors"))
