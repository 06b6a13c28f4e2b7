"""End-to-end prefill of a Mistral-7B-shaped transformers model (random BF16 weights) with
each attention backend: wall time per forward, and the KL divergence of its next-token
distributions from a run whose attention is computed in float32.

    python bench/e2e_transformers.py --seqlen 16384 --out bench/results

Records the run in <out>/<gpu>.json under <date>-<gpu>-e2e-transformers.json (zyfa.bench.store)
and prints a table.
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import zyfa  # noqa: E402
import zyfa.integrations.transformers as zt  # noqa: E402
from zyfa.bench.run import versions  # noqa: E402
from zyfa.bench.store import results_file, run_key, save_entry  # noqa: E402


def fp32_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kw):
    """Causal attention in float32 (SDPA on fp32 copies): the accuracy reference. (B, H, S, D) in."""
    g = query.shape[1] // key.shape[1]
    k, v = (t.float().repeat_interleave(g, dim=1) for t in (key, value))
    out = torch.nn.functional.scaled_dot_product_attention(query.float(), k, v, is_causal=True, scale=scaling)
    return out.transpose(1, 2).to(query.dtype), None


def fp8_inputs_fp32_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kw):
    """zyfa_fp8's quantization of q, k, v, then float32 attention: the error FP8 inputs alone cause."""
    x = zyfa.quantize_fp8(*(t.transpose(1, 2) for t in (query, key, value)))
    deq = [t.float().transpose(1, 2) for t in x.dequantized()]
    return fp32_attention(module, *deq, attention_mask, scaling=scaling)[0].to(query.dtype), None


def fa3_fp8_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kw):
    """FlashAttention-3 FP8 on the same quantized inputs as zyfa_fp8."""
    import fa3_fwd_interface
    x = zyfa.quantize_fp8(*(t.transpose(1, 2) for t in (query, key, value)))
    out = fa3_fwd_interface.flash_attn_func(x.q, x.k, x.v.contiguous(), softmax_scale=scaling, causal=True,
                                            q_descale=x.q_descale, k_descale=x.k_descale, v_descale=x.v_descale)
    return (out[0] if isinstance(out, tuple) else out).to(query.dtype), None


def fa3_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kw):
    import fa3_fwd_interface
    out = fa3_fwd_interface.flash_attn_func(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                                            softmax_scale=scaling, causal=True)
    return (out[0] if isinstance(out, tuple) else out), None


def register_extra():
    zt.register()
    for name, fn in (("fp32_ref", fp32_attention), ("fa3", fa3_attention), ("fa3_fp8", fa3_fp8_attention),
                     ("fp8_inputs_fp32", fp8_inputs_fp32_attention)):
        zt.register_backend(name, fn)


def kl_mean(ref_logits, logits, chunk=2048) -> float:
    """Mean over positions of KL(softmax(ref) || softmax(logits)), in float32 chunks."""
    total = 0.0
    for i in range(0, ref_logits.shape[1], chunk):
        lp = ref_logits[:, i:i + chunk].float().log_softmax(-1)
        lq = logits[:, i:i + chunk].float().log_softmax(-1)
        total += (lp.exp() * (lp - lq)).sum().item()
    return total / (ref_logits.shape[0] * ref_logits.shape[1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqlen", type=int, default=16384)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=os.path.join("bench", "results"))
    a = ap.parse_args()
    from transformers import AutoModelForCausalLM, MistralConfig
    register_extra()
    cfg = MistralConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=a.layers,
                        num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=32000,
                        max_position_embeddings=32768, sliding_window=None)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa").eval()
    ids = torch.randint(0, cfg.vocab_size, (1, a.seqlen), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    impls = ["fp32_ref", "sdpa", "fa3", "zyfa", "fp8_inputs_fp32", "fa3_fp8", "zyfa_fp8"]
    logits, rows = {}, []
    for impl in impls:
        row = dict(attn_implementation=impl)
        try:
            model.set_attn_implementation(impl)
            with torch.no_grad():
                logits[impl] = model(ids).logits            # warm-up, compiles kernels
                torch.cuda.synchronize()
                times = []
                for _ in range(a.reps):
                    t0 = time.perf_counter()
                    model(ids)
                    torch.cuda.synchronize()
                    times.append(time.perf_counter() - t0)
            row.update(status="ok", seconds_median=sorted(times)[len(times) // 2], seconds_all=times)
        except Exception as e:  # noqa: BLE001  (a backend that fails is recorded, not dropped)
            row.update(status="failed", reason=f"{type(e).__name__}: {str(e)[:300]}")
        rows.append(row)
        print(row, flush=True)
    for row in rows:
        if row["status"] == "ok" and "fp32_ref" in logits:
            row["kl_vs_fp32_attention"] = kl_mean(logits["fp32_ref"], logits[row["attn_implementation"]])
            row["argmax_agreement"] = (logits["fp32_ref"].argmax(-1) == logits[row["attn_implementation"]]
                                       .argmax(-1)).float().mean().item()
    doc = dict(date=datetime.date.today().isoformat(), gpu=torch.cuda.get_device_name(), versions=versions(None),
               model="Mistral-7B-shaped (MistralConfig defaults: 32 layers, 32/8 heads, d128), random BF16 weights",
               seqlen=a.seqlen, layers=a.layers, records=rows)
    import transformers
    doc["versions"]["transformers"] = transformers.__version__
    path, key = results_file(a.out), run_key("e2e-transformers")
    save_entry(path, key, doc)
    print(f"\n{'attention':10s} {'prefill s':>10s} {'KL vs fp32 attn':>16s} {'argmax agree':>13s}")
    for r in rows:
        if r["status"] == "ok":
            print(f"{r['attn_implementation']:10s} {r['seconds_median']:10.3f} {r.get('kl_vs_fp32_attention', 0):16.3e} "
                  f"{r.get('argmax_agreement', 0):13.4f}")
        else:
            print(f"{r['attn_implementation']:10s} FAILED {r['reason'][:100]}")
    print("wrote", path, "→", key)


if __name__ == "__main__":
    main()
