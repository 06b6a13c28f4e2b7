"""An E4M3 KV cache for transformers: keys and values stored as float8_e4m3fn codes with one
float32 descale a token and kv head, (d + 4) bytes a token and head against BF16's 2d (d = 128:
52%), read in place by the zyfa backends' decode steps (flash_attn_with_kvcache's per-token
descales, zyfa.spec.kv_cache).

    from zyfa.integrations.fp8_cache import E4M3Cache
    model.generate(ids, past_key_values=E4M3Cache(), attn_implementation="zyfa")

Each update quantizes the new tokens once (zyfa.quantize.quantize_tokens) and appends them;
update returns the codes with their descales attached (``descale_of``), so the attention call
finds them without a side channel. Prefill (and any call the decode kernel does not take)
attends over the dequantized cache, so every token sees the keys decode will see: the prompt's
logits carry the quantization too. Only the zyfa backends read the codes; with "sdpa" or
"eager" the model sees float8 tensors and fails. Every layer keeps all its tokens (a sliding
layer's mask applies its window), as a DynamicCache of DynamicLayers does.
"""
from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer

from ..quantize import quantize_tokens

_DESCALE = "zyfa_descale"      # the attribute an E4M3 key/value tensor carries its descales in


def descale_of(t: torch.Tensor) -> torch.Tensor | None:
    """The per-token descales (batch, kv_heads, tokens) attached to an E4M3 cache tensor."""
    return getattr(t, _DESCALE, None)


def dequantize(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An E4M3 cache tensor (batch, kv_heads, tokens, d) as ``dtype`` values."""
    d = descale_of(t)
    if d is None:
        raise ValueError("an E4M3 key/value tensor without per-token descales reached attention; "
                         "E4M3 caches come from zyfa.integrations.fp8_cache.E4M3Cache")
    return (t.float() * d[..., None]).to(dtype)


class E4M3Layer(DynamicLayer):
    """A DynamicLayer whose keys/values are E4M3 codes, with descales beside them."""

    def lazy_initialization(self, key_states, value_states):
        super().lazy_initialization(key_states, value_states)
        self.dtype = key_states.dtype
        self.keys = self.keys.to(torch.float8_e4m3fn)
        self.values = self.values.to(torch.float8_e4m3fn)
        self.key_descale = torch.tensor([], dtype=torch.float32, device=self.device)
        self.value_descale = torch.tensor([], dtype=torch.float32, device=self.device)

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        k8, kd = quantize_tokens(key_states)
        v8, vd = quantize_tokens(value_states)
        self.keys, self.key_descale = torch.cat([self.keys, k8], -2), torch.cat([self.key_descale, kd], -1)
        self.values, self.value_descale = torch.cat([self.values, v8], -2), torch.cat([self.value_descale, vd], -1)
        setattr(self.keys, _DESCALE, self.key_descale)
        setattr(self.values, _DESCALE, self.value_descale)
        return self.keys, self.values

    def _apply(self, fn):
        """Apply ``fn`` to codes and descales alike (crop, beam reordering)."""
        self.keys, self.values = fn(self.keys, 2), fn(self.values, 2)
        self.key_descale, self.value_descale = fn(self.key_descale, 2), fn(self.value_descale, 2)

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes a negative count of tokens to remove, got {tokens_to_remove}")
        if tokens_to_remove and self.is_initialized:
            self._apply(lambda t, dim: t.narrow(dim, 0, t.shape[dim] + tokens_to_remove))

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.get_seq_length() > 0:
            self._apply(lambda t, dim: t.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.get_seq_length() > 0:
            self._apply(lambda t, dim: t[indices])

    def reset(self) -> None:
        self.key_descale = self.value_descale = None
        super().reset()


class E4M3Cache(Cache):
    """A KV cache of E4M3 layers, one a decoder layer, created as the model first writes them."""

    def __init__(self):
        super().__init__(layer_class_to_replicate=E4M3Layer)
