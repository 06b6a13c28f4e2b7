"""What the Hadamard rotation buys the INT8 mode's end-to-end error (CPU, the reference backend: the
spec's bits): realistic inputs at 2K, FP8 per head in the fast mode (FA3's algorithm) as the base."""
import torch, zyfa, time
from zyfa.activations import make
from zyfa.spec.reference import attention_fp64
from zyfa.bench.measure import rel_err
torch.manual_seed(0)
for (name, B, S, Hq, Hkv, D, Dv) in [("d128 GQA", 1, 2048, 8, 2, 128, 128), ("MLA 192/128", 1, 2048, 4, 4, 192, 128), ("d64", 1, 2048, 4, 4, 64, 64)]:
  for seed in (1, 2):
    q, k, v = make("realistic", B, S, Hq, Hkv, D, Dv, seed=seed)
    ref = attention_fp64(q, k, v, causal=True)
    e = {}
    x = zyfa.quantize_fp8(q, k, v)
    e["fp8 head running"] = rel_err(zyfa.flash_attn_func(causal=True, **x.kwargs(), backend="reference", p_rule="exact", ref_rule="running"), ref)
    for had in (True, False):
        x = zyfa.quantize_int8_qk(q, k, v, hadamard=had)
        e[f"int8 had={had}"] = rel_err(zyfa.flash_attn_func(causal=True, **x.kwargs(), backend="reference"), ref)
    base = e["fp8 head running"]
    print(name, seed, " ".join(f"{k}: {v:.3e} ({v/base:.3f}x)" for k, v in e.items()), flush=True)
