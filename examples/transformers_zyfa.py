"""Run a transformers causal LM with zyfa attention and compare it with SDPA.

    python examples/transformers_zyfa.py                       # tiny random Llama (CPU or GPU)
    python examples/transformers_zyfa.py --model mistralai/Mistral-7B-v0.1 --seqlen 8192

Prints, for attn_implementation "sdpa", "zyfa" and "zyfa_fp8", the prefill time and the
KL divergence of the next-token distributions from the SDPA run.
"""
from __future__ import annotations

import argparse
import os
import time

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")      # zyfa's kernels through Triton's interpreter

from transformers import AutoModelForCausalLM, LlamaConfig  # noqa: E402

import zyfa.integrations.transformers as zt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="a Hugging Face model name or path (default: a tiny random Llama)")
    ap.add_argument("--seqlen", type=int, default=None)
    a = ap.parse_args()
    zt.register()
    gpu = torch.cuda.is_available()
    dtype = torch.bfloat16
    if a.model:
        model = AutoModelForCausalLM.from_pretrained(a.model, dtype=dtype, attn_implementation="zyfa")
    else:
        cfg = LlamaConfig(vocab_size=1000, hidden_size=512, intermediate_size=1024, num_hidden_layers=2,
                          num_attention_heads=8, num_key_value_heads=2, head_dim=64)
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="zyfa")
    model = model.to("cuda" if gpu else "cpu").eval()
    seqlen = a.seqlen or (4096 if gpu else 128)
    ids = torch.randint(0, model.config.vocab_size, (1, seqlen), device=model.device)
    logits = {}
    for impl in ("sdpa", "zyfa", "zyfa_fp8"):
        model.set_attn_implementation(impl)
        with torch.no_grad():
            model(ids)                                   # warm-up (kernel compilation)
            if gpu:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            logits[impl] = model(ids).logits.float()
            if gpu:
                torch.cuda.synchronize()
        ref = logits["sdpa"].log_softmax(-1)
        kl = (ref.exp() * (ref - logits[impl].log_softmax(-1))).sum(-1).mean().item()
        print(f"{impl:9s} prefill {time.perf_counter() - t0:7.3f} s   KL vs sdpa {kl:.3e}")


if __name__ == "__main__":
    main()
