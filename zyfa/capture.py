"""Record the post-RoPE Q, K, V that a Hugging Face transformers decoder hands to its
attention, into safetensors, for benchmarking and testing zyfa on real activations.

    from zyfa.activations import capture, load_capture
    capture(model, input_ids, layers=[0, 15, 31], path="llama.safetensors")
    for layer in load_capture("llama.safetensors"): ...

The hook point is transformers' attention interface: a temporary attention function
sees exactly what any attention backend would (after RoPE, after MLA's up-projection,
before GQA repetition), records it and runs the model's own attention unchanged.
"""
from __future__ import annotations

import dataclasses
import json

import torch

_HOOK = "zyfa_capture"


@dataclasses.dataclass
class CapturedLayer:
    """One layer's attention inputs in FlashAttention layout (batch, seqlen, heads, head_dim)."""
    name: str
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    softmax_scale: float


def _attention_interfaces():
    try:
        from transformers import AttentionInterface
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        from transformers.masking_utils import AttentionMaskInterface
    except ImportError as e:
        raise ImportError("zyfa.activations.capture needs transformers>=4.56 "
                          "(pip install 'zyfa[capture]')") from e
    return AttentionInterface, AttentionMaskInterface, sdpa_attention_forward


def capture(model, input_ids: torch.Tensor, layers=None, path: str | None = None) -> list[CapturedLayer]:
    """Run ``model(input_ids)`` once and record each chosen layer's attention inputs.

    layers: indices of decoder layers (default: all); path: also write a safetensors file.
    The model's attention implementation is restored afterwards, also on error.
    """
    AttentionInterface, AttentionMaskInterface, sdpa_forward = _attention_interfaces()
    from .integrations.transformers import register_backend
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        raise ValueError(f"input_ids must be a 2-D (batch, seqlen) tensor, got "
                         f"{getattr(input_ids, 'shape', type(input_ids).__name__)}")
    previous = model.config._attn_implementation
    delegate = AttentionInterface._global_mapping.get(previous, sdpa_forward)
    wanted = None if layers is None else set(int(i) for i in layers)
    records: dict[int, CapturedLayer] = {}

    def record(module, query, key, value, attention_mask, scaling=None, **kwargs):
        idx = getattr(module, "layer_idx", len(records))
        if wanted is None or idx in wanted:
            fa = [t.detach().transpose(1, 2).contiguous().cpu() for t in (query, key, value)]
            scale = float(scaling) if scaling is not None else query.shape[-1] ** -0.5
            records[idx] = CapturedLayer(f"layer{idx}", *fa, scale)
        return delegate(module, query, key, value, attention_mask, scaling=scaling, **kwargs)

    register_backend(_HOOK, record, AttentionMaskInterface._global_mapping.get(previous))
    try:
        model.set_attn_implementation(_HOOK)
        with torch.no_grad():
            model(input_ids.to(model.device))
    finally:
        model.set_attn_implementation(previous)
    if wanted is not None and wanted - set(records):
        count = getattr(model.config, "num_hidden_layers", None)
        has = f"the model has {count} layers (0..{count - 1})" if count else "the model's decoder layers were not found"
        raise ValueError(f"layers {sorted(wanted - set(records))} were not reached; {has}")
    out = [records[i] for i in sorted(records)]
    if path is not None:
        save_capture(out, path, model_type=getattr(model.config, "model_type", "unknown"))
    return out


def save_capture(layers: list[CapturedLayer], path: str, model_type: str = "unknown") -> None:
    from safetensors.torch import save_file
    tensors = {f"{c.name}.{t}": getattr(c, t) for c in layers for t in ("q", "k", "v")}
    meta = {"model_type": model_type, "softmax_scale": json.dumps({c.name: c.softmax_scale for c in layers})}
    save_file(tensors, path, metadata=meta)


def load_capture(path: str) -> list[CapturedLayer]:
    """Read a file written by capture(); raises ValueError on a file it cannot use."""
    from safetensors import SafetensorError, safe_open
    try:
        with safe_open(path, framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError) as e:
        raise ValueError(f"cannot read activation file {path!r}: {e}") from e
    if "softmax_scale" not in meta:
        raise ValueError(f"{path!r} is not a zyfa capture (no softmax_scale metadata)")
    scales = json.loads(meta["softmax_scale"])
    layers = []
    for name in sorted(scales, key=lambda n: int(n.removeprefix("layer"))):
        try:
            q, k, v = (tensors[f"{name}.{t}"] for t in ("q", "k", "v"))
        except KeyError as e:
            raise ValueError(f"{path!r}: {name} lacks tensor {e}") from e
        if q.dim() != 4 or k.shape[:3] != v.shape[:3] or q.shape[0] != k.shape[0]:
            raise ValueError(f"{path!r}: {name} has inconsistent shapes q {tuple(q.shape)}, "
                             f"k {tuple(k.shape)}, v {tuple(v.shape)}")
        layers.append(CapturedLayer(name, q, k, v, float(scales[name])))
    return layers
