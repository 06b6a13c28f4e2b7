"""Speed of the FP8 quantizer on the GPU beside a copy of the same tensors, in one process.

    python notes/ab/quantizer_speed.py [--out results.json]

For each shape: the time of `quantize_fp8` (PyTorch path and fused Triton kernel, granularity
"head", plain and smooth_k + hadamard), of `torch.Tensor.copy_` of q, k and v into
preallocated BF16 tensors (the copy bandwidth: bytes read plus written over time), and, for
the fused kernel, its bandwidth counted the same way over the bytes it must move at least
(q, k, v read once in BF16, written once in E4M3; its extra amax pass is not counted, so the
figure is a lower bound of what it achieves against what it has to do). "fused_graph" replays
the fused call from a CUDA graph: the device's time without the host's launch overhead.
Then the default FP8 attention alone on quantized inputs, and quantize_fp8 plus that attention
in one call (what `zyfa bench` times as `zyfa-auto-fp8+quantize`): whether the two add up.
The same for the INT8 Q.K^T mode (`quantize_int8_qk`, PyTorch and fused; its attention runs
where the dispatcher sends it: the generated kernel at head dim 128).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import torch  # noqa: E402

import zyfa  # noqa: E402
from zyfa.activations import make  # noqa: E402
from zyfa.bench.measure import median_ms  # noqa: E402

SHAPES = [  # B, S, Hq, Hkv, D
    (1, 16384, 32, 8, 128),
    (1, 32768, 32, 32, 128),
    (4, 4096, 32, 32, 128),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    rows = []
    for B, S, Hq, Hkv, D in SHAPES:
        q, k, v = (t.bfloat16() for t in make("realistic", B, S, Hq, Hkv, D, seed=1, device="cuda"))
        elems = q.numel() + k.numel() + v.numel()
        dst = [torch.empty_like(t) for t in (q, k, v)]

        def copy():
            for d, s in zip(dst, (q, k, v)):
                d.copy_(s)
        copy_ms = median_ms(copy)
        copy_gbs = elems * 4 / copy_ms / 1e6            # 2 bytes read + 2 written per element
        rec = dict(shape=[B, S, Hq, Hkv, D], copy_ms=copy_ms, copy_gb_s=copy_gbs)
        for name, opts in (("plain", {}), ("smooth_k+hadamard", {"smooth_k": True, "hadamard": True})):
            for fused in (False, True):
                ms = median_ms(lambda: zyfa.quantize_fp8(q, k, v, fused=fused, **opts))
                key = f"{'fused' if fused else 'pytorch'}_{name}"
                rec[key + "_ms"] = ms
                rec[key + "_gb_s"] = elems * 3 / ms / 1e6       # 2 bytes read + 1 written
        for fused in (False, True):                          # the INT8 Q.K^T mode's quantizer (smooth_k + hadamard)
            ms = median_ms(lambda: zyfa.quantize_int8_qk(q, k, v, fused=fused))
            rec[f"{'fused' if fused else 'pytorch'}_int8qk_ms"] = ms
            rec[f"{'fused' if fused else 'pytorch'}_int8qk_gb_s"] = elems * 3 / ms / 1e6
        graph = torch.cuda.CUDAGraph()
        zyfa.quantize_fp8(q, k, v)                           # compiled before the capture
        with torch.cuda.graph(graph):
            zyfa.quantize_fp8(q, k, v, fused=True)
        ms = median_ms(graph.replay)
        rec.update(fused_graph_ms=ms, fused_graph_gb_s=elems * 3 / ms / 1e6)
        x = zyfa.quantize_fp8(q, k, v)
        rec["attention_ms"] = median_ms(lambda: zyfa.flash_attn_func(causal=True, **x.kwargs()))
        rec["quantize_attention_ms"] = median_ms(lambda: zyfa.flash_attn_func(causal=True, **zyfa.quantize_fp8(q, k, v).kwargs()))
        x = zyfa.quantize_int8_qk(q, k, v)
        rec["int8qk_attention_ms"] = median_ms(lambda: zyfa.flash_attn_func(causal=True, **x.kwargs()))
        rec["int8qk_quantize_attention_ms"] = median_ms(
            lambda: zyfa.flash_attn_func(causal=True, **zyfa.quantize_int8_qk(q, k, v).kwargs()))
        rows.append(rec)
    print(f"{'B,S,Hq,Hkv,D':22s} {'copy GB/s':>10s} " + " ".join(
        f"{k[:-5]:>26s}" for k in rows[0] if k.endswith("_gb_s") and k != "copy_gb_s"))
    for r in rows:
        cells = [f"{r[k]:8.0f} ({r[k] / r['copy_gb_s']:4.0%}) {r[k[:-5] + '_ms']:6.3f}ms"
                 for k in r if k.endswith("_gb_s") and k != "copy_gb_s"]
        print(f"{str(r['shape']):22s} {r['copy_gb_s']:10.0f} " + " ".join(f"{c:>26s}" for c in cells))
    for r in rows:
        print(f"{str(r['shape']):22s} attention {r['attention_ms']:.3f} ms, quantize + attention "
              f"{r['quantize_attention_ms']:.3f} ms (the fused quantizer alone {r['fused_plain_ms']:.3f} ms); "
              f"INT8 Q.K^T {r['int8qk_attention_ms']:.3f} ms, quantize + attention "
              f"{r['int8qk_quantize_attention_ms']:.3f} ms (its fused quantizer {r['fused_int8qk_ms']:.3f} ms)")
    if a.out:
        doc = dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                   triton=__import__("triton").__version__, rows=rows)
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
