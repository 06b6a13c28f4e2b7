"""`zyfa demo`: zyfa attention on realistic activations, error against float64 and speed.

On a GPU: a 16K-token GQA prefill (Mistral-7B-shaped heads), BF16 and FP8 paths beside
PyTorch SDPA, TFLOP/s and error. Without one: small shapes through Triton's interpreter
(it says so), error only. (`python -m zyfa.verify.gfx950` runs the generated MI355X kernel
in zyfa's emulator.)
"""
from __future__ import annotations

import os
import time


def run(seqlen: int | None = None) -> None:
    import torch
    gpu = torch.cuda.is_available()
    if not gpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")     # must precede the kernels' import
    import zyfa
    from zyfa.activations import realistic
    from zyfa.spec.rules import DEFAULT_P_RULE
    from zyfa.bench.measure import rel_err
    from zyfa.spec.reference import attention_fp64

    dev = "cuda" if gpu else "cpu"
    if seqlen is not None and seqlen < 1:
        raise ValueError(f"seqlen must be at least 1, got {seqlen}")
    B, S, Hq, Hkv, D = (1, seqlen or 16384, 32, 8, 128) if gpu else (1, seqlen or 256, 4, 2, 128)
    where = torch.cuda.get_device_name() if gpu else ("CPU, Triton interpreter (no GPU found): small shapes; "
                                                      "times are the interpreter's, not a kernel's")
    print(f"zyfa demo on {where}", flush=True)
    print(f"shape: batch {B}, seqlen {S}, heads {Hq}/{Hkv} (GQA), head_dim {D}, causal, realistic activations")
    q, k, v = realistic(B, S, Hq, Hkv, D, seed=0, device=dev)
    rows = slice(S - 512, S) if gpu else slice(0, S)      # float64 reference on the last rows on GPU
    ref = attention_fp64(q[:, rows], k, v, causal=True)
    flops = 2.0 * B * Hq * S * (S + 1) / 2 * (2 * D)

    def timed(fn):
        if not gpu:
            t0 = time.perf_counter()
            out = fn()
            return out, None, time.perf_counter() - t0
        import triton
        out = fn()
        ms = triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="median")
        return out, flops / ms / 1e9, ms / 1e3

    x = zyfa.quantize_fp8(q, k, v)
    runs = [("zyfa bf16", lambda: zyfa.flash_attn_func(q, k, v, causal=True)),
            (f"zyfa fp8 ({DEFAULT_P_RULE} P)", lambda: zyfa.flash_attn_func(causal=True, **x.kwargs())),
            ("zyfa fp8 (naive lean P)", lambda: zyfa.flash_attn_func(causal=True, **x.kwargs(), p_rule="lean"))]
    if gpu:
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
        runs.append(("torch sdpa bf16", lambda: torch.nn.functional.scaled_dot_product_attention(
            qt, kt, vt, is_causal=True, enable_gqa=True).transpose(1, 2)))
    print(f"{'method':38s} {'err vs fp64':>12s} {'TFLOP/s':>9s} {'time':>9s}", flush=True)
    for name, fn in runs:
        print(f"{name:38s} running ...", end="\r", flush=True)
        out, tflops, sec = timed(fn)
        err = rel_err(out[:, rows], ref)
        tf = f"{tflops:9.0f}" if tflops else f"{'-':>9s}"
        print(f"{name:38s} {err:12.3e} {tf} {sec * 1e3:7.1f}ms")
    print("backend:", zyfa.explain(causal=True, **x.kwargs()).splitlines()[0])
    print("err = ||out - ref|| / ||ref|| against float64 attention on the unquantized inputs"
          + (" (last 512 query rows)" if gpu else ""))
