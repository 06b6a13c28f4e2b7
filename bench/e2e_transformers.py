"""End-to-end prefill of a transformers model with each attention backend: wall time per
forward (the median of --reps turns, the backends timed in turns), the GPU kernels' time in
one forward (torch.profiler), and the KL divergence of its next-token distributions from a
run whose attention is computed in float32.

    python bench/e2e_transformers.py --seqlen 16384 --out bench/results
    python bench/e2e_transformers.py --trained --train-minutes 4 --seqlen 8192 --decode-steps 256

The default model is Mistral-7B-shaped with random BF16 weights (for speed: its attention has
neither the diffuse nor the peaked heads of a trained model). ``--trained`` first trains a
small byte-level decoder (6 layers, GQA 8/2, head dim 128, ~68M parameters) on the Python
standard library's sources, which every machine with Python has, then measures it on held-out
text. ``--decode-steps``: the last tokens of the text are then decoded one at a time on zyfa with a
BF16 and an E4M3 KV cache, and the E4M3 cache's KL from the BF16 one recorded. Records the run in <out>/<gpu>.json under <date>-<gpu>-e2e-transformers.json (trained:
...-e2e-transformers-trained.json; zyfa.bench.store) and prints a table.
"""
from __future__ import annotations

import argparse
import datetime
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import zyfa  # noqa: E402
import zyfa.integrations.transformers as zt  # noqa: E402
from zyfa.bench.measure import kernel_ms  # noqa: E402
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
                     ("fp8_inputs_fp32", fp8_inputs_fp32_attention),
                     ("zyfa_int8qk", zt.int8_attention_forward)):      # zyfa_int8, under its earlier records' label
        zt.register_backend(name, fn)


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def kernel_seconds(model, ids) -> float:
    """The GPU kernels' summed time in one forward (torch.profiler): the backends' other
    kernels are the same, so the difference is their attention's, without the wall time's
    turn-to-turn spread (clocks, the power limit)."""
    with torch.no_grad():
        return sum(kernel_ms(lambda: model(ids)).values()) / 1e3


def kl_mean(ref_logits, logits, chunk=2048) -> float:
    """Mean over positions of KL(softmax(ref) || softmax(logits)), in float32 chunks."""
    total = 0.0
    for i in range(0, ref_logits.shape[1], chunk):
        lp = ref_logits[:, i:i + chunk].float().log_softmax(-1)
        lq = logits[:, i:i + chunk].float().log_softmax(-1)
        total += (lp.exp() * (lp - lq)).sum().item()
    return total / (ref_logits.shape[0] * ref_logits.shape[1])


def decode_kl(model, ids, prompt: int, steps: int) -> dict:
    """Decode on zyfa, teacher-forced: the first ``prompt`` tokens of ``ids`` prefilled, then
    ``steps`` one-token steps over the tokens that follow, once with a BF16 cache (DynamicCache)
    and once with zyfa's E4M3 cache (E4M3Cache: codes and per-token scales, read in place by the
    decode kernel). The mean KL of the E4M3 cache's next-token distributions from the BF16
    cache's, their argmax agreement, and the SDPA fallbacks logged while decoding (none expected)."""
    import logging
    from transformers import DynamicCache
    from zyfa.integrations.fp8_cache import E4M3Cache

    class Count(logging.Handler):
        fallbacks = 0

        def emit(self, record):
            Count.fallbacks += "falling back" in record.getMessage()
    handler = Count()
    log = logging.getLogger("zyfa")
    log.addHandler(handler)
    zt._logged.clear()
    model.set_attn_implementation("zyfa")
    out = {}
    try:
        for name, cache in (("bf16", DynamicCache()), ("e4m3", E4M3Cache())):
            steps_logits = []
            with torch.no_grad():
                model(ids[:, :prompt], past_key_values=cache, use_cache=True)
                for i in range(prompt, prompt + steps):
                    steps_logits.append(model(ids[:, i:i + 1], past_key_values=cache, use_cache=True).logits[:, -1])
            out[name] = torch.stack(steps_logits, 1)
    finally:
        log.removeHandler(handler)
    return dict(decode_prompt=prompt, decode_steps=steps, kl_e4m3_vs_bf16_cache=kl_mean(out["bf16"], out["e4m3"]),
                argmax_agreement_e4m3_vs_bf16_cache=(out["bf16"].argmax(-1) == out["e4m3"].argmax(-1)).float()
                .mean().item(), sdpa_fallbacks_logged=Count.fallbacks)


def stdlib_bytes(limit: int = 48 << 20) -> torch.Tensor:
    """The Python standard library's .py sources (no site-packages), concatenated, as uint8."""
    import pathlib
    import sysconfig
    root, chunks, total = pathlib.Path(sysconfig.get_paths()["stdlib"]), [], 0
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.parts or "dist-packages" in path.parts:
            continue
        chunks.append(path.read_bytes())
        total += len(chunks[-1])
        if total >= limit:
            break
    return torch.frombuffer(bytearray(b"\n".join(chunks)), dtype=torch.uint8)


def trained_model(device, minutes: float, max_steps: int, seqlen: int, batch: int, layers: int):
    """A byte-level decoder trained from scratch on the standard library's sources (the last 5%
    held out): AdamW, linear warm-up then cosine decay, BF16 autocast. Returns (model in BF16,
    held-out bytes, description)."""
    from transformers import AutoModelForCausalLM, MistralConfig
    data = stdlib_bytes()
    split = int(len(data) * 0.95)
    train_data, held_out = data[:split].to(device), data[split:]
    cfg = MistralConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=layers, num_attention_heads=8,
                        num_key_value_heads=2, head_dim=128, vocab_size=256, max_position_embeddings=65536,
                        rope_theta=500000.0, sliding_window=None, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").to(device)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    warmup, horizon = 100, max_steps
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min(1.0, (i + 1) / warmup) * 0.5 * (
        1 + math.cos(math.pi * min(i, horizon) / horizon)))
    g = torch.Generator(device=device).manual_seed(0)
    t0, step, loss = time.perf_counter(), 0, float("nan")
    model.train()
    while step < max_steps and time.perf_counter() - t0 < 60 * minutes:
        start = torch.randint(0, len(train_data) - seqlen - 1, (batch,), device=device, generator=g)
        x = train_data[start[:, None] + torch.arange(seqlen, device=device)].long()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss_t = model(input_ids=x, labels=x).loss
        loss_t.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        if step % 200 == 0 or step == 1:
            loss = loss_t.item()
            print(f"step {step}: train loss {loss:.3f} ({time.perf_counter() - t0:.0f} s)", flush=True)
    loss = loss_t.item()
    model = model.to(torch.bfloat16).eval()
    desc = (f"trained byte-level decoder ({layers} layers, GQA 8/2, head dim 128, {params / 1e6:.0f}M parameters; "
            f"{step} steps of {batch} x {seqlen} bytes in {time.perf_counter() - t0:.0f} s on the Python standard "
            f"library's sources; final train loss {loss:.3f} nats/byte)")
    return model, held_out, desc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqlen", type=int, default=16384)
    ap.add_argument("--layers", type=int, default=None, help="32 (random Mistral-7B shape) or 6 (--trained)")
    ap.add_argument("--reps", type=int, default=5, help="turns: each backend timed once a turn")
    ap.add_argument("--trained", action="store_true", help="train a small byte-level decoder first")
    ap.add_argument("--train-minutes", type=float, default=4.0)
    ap.add_argument("--train-steps", type=int, default=3000, help="the most steps (also the cosine horizon)")
    ap.add_argument("--train-seqlen", type=int, default=4096)
    ap.add_argument("--train-batch", type=int, default=8)
    ap.add_argument("--impls", default="fp32_ref,sdpa,fa3,zyfa,fp8_inputs_fp32,fa3_fp8,zyfa_fp8,zyfa_int8qk")
    ap.add_argument("--out", default=os.path.join("bench", "results"))
    ap.add_argument("--decode-steps", type=int, default=0,
                    help="then decode this many tokens after the first --seqlen minus them, teacher-forced, with a "
                         "BF16 and an E4M3 cache on zyfa: the E4M3 cache's KL from the BF16 one")
    a = ap.parse_args()
    from transformers import AutoModelForCausalLM, MistralConfig
    register_extra()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if a.trained:
        layers = a.layers or 6
        model, held_out, model_desc = trained_model(device, a.train_minutes, a.train_steps, a.train_seqlen,
                                                    a.train_batch, layers)
        if len(held_out) < a.seqlen:
            raise SystemExit(f"--seqlen {a.seqlen} is longer than the held-out text ({len(held_out)} bytes)")
        ids = held_out[:a.seqlen].long()[None].to(device)
    else:
        layers = a.layers or 32
        cfg = MistralConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=layers,
                            num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=32000,
                            max_position_embeddings=32768, sliding_window=None)
        torch.manual_seed(0)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa").eval()
        ids = torch.randint(0, cfg.vocab_size, (1, a.seqlen), device=device,
                            generator=torch.Generator(device).manual_seed(1))
        model_desc = "Mistral-7B-shaped (MistralConfig defaults: 32/8 heads, d128), random BF16 weights"
    impls = a.impls.split(",")
    logits, rows, times = {}, {}, {}
    for impl in impls:            # warm-up (compiles kernels) and the logits each backend gives
        rows[impl] = row = dict(attn_implementation=impl)
        try:
            model.set_attn_implementation(impl)
            with torch.no_grad():
                logits[impl] = model(ids).logits
                _sync(device)
            times[impl] = []
        except Exception as e:  # noqa: BLE001  (a backend that fails is recorded, not dropped)
            row.update(status="failed", reason=f"{type(e).__name__}: {str(e)[:300]}")
            print(row, flush=True)
    # the backends take turns, so a clock or temperature drift over the run falls on all of them alike
    for _ in range(a.reps):
        for impl in times:
            model.set_attn_implementation(impl)
            with torch.no_grad():
                t0 = time.perf_counter()
                model(ids)
                _sync(device)
                times[impl].append(time.perf_counter() - t0)
    for impl, ts in times.items():
        rows[impl].update(status="ok", seconds_median=sorted(ts)[len(ts) // 2], seconds_all=ts)
        if device.type == "cuda":
            model.set_attn_implementation(impl)
            rows[impl]["kernel_seconds"] = kernel_seconds(model, ids)
        print(rows[impl], flush=True)
    rows = list(rows.values())
    for row in rows:
        if row["status"] == "ok" and "fp32_ref" in logits:
            row["kl_vs_fp32_attention"] = kl_mean(logits["fp32_ref"], logits[row["attn_implementation"]])
            row["argmax_agreement"] = (logits["fp32_ref"].argmax(-1) == logits[row["attn_implementation"]]
                                       .argmax(-1)).float().mean().item()
    gpu = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    doc = dict(date=datetime.date.today().isoformat(), gpu=gpu, versions=versions(None), model=model_desc,
               seqlen=a.seqlen, turns=True, layers=layers, records=rows)
    if a.decode_steps:
        doc["decode"] = decode_kl(model, ids, a.seqlen - a.decode_steps, a.decode_steps)
        print("decode:", doc["decode"], flush=True)
    import transformers
    doc["versions"]["transformers"] = transformers.__version__
    path, key = results_file(a.out), run_key("e2e-transformers-trained" if a.trained else "e2e-transformers")
    save_entry(path, key, doc)
    print(f"\n{'attention':10s} {'prefill s':>10s} {'kernels s':>10s} {'KL vs fp32 attn':>16s} {'argmax agree':>13s}")
    for r in rows:
        if r["status"] == "ok":
            print(f"{r['attn_implementation']:10s} {r['seconds_median']:10.3f} {r.get('kernel_seconds', 0):10.3f} "
                  f"{r.get('kl_vs_fp32_attention', 0):16.3e} "
                  f"{r.get('argmax_agreement', 0):13.4f}")
        else:
            print(f"{r['attn_implementation']:10s} FAILED {r['reason'][:100]}")
    print("wrote", path, "→", key)


if __name__ == "__main__":
    main()
