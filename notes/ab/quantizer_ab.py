"""The fused quantizers against an earlier copy of their module, in one process.

    python notes/ab/quantizer_ab.py BEFORE.py [OUT.json]

BEFORE.py: zyfa/triton_kernels/quantize.py as it was (e.g. `git show REV:zyfa/triton_kernels/
quantize.py` with its relative imports made absolute). For each shape and call (quantize_fp8
plain, hadamard, smooth_k + hadamard; quantize_int8_qk), both versions' bytes and descales
must be equal; then each one's median time, alternated twice, beside a copy of q, k and v.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import torch  # noqa: E402

import zyfa.triton_kernels.quantize as now  # noqa: E402
from zyfa.activations import make  # noqa: E402
from zyfa.bench.measure import median_ms  # noqa: E402

SHAPES = {"Mistral-7B 16K": (1, 16384, 32, 8, 128, 128), "DeepSeek-V2-Lite 16K": (1, 16384, 16, 16, 192, 128),
          "d128 32 heads 32K": (1, 32768, 32, 32, 128, 128), "d128 batch 4 4K": (4, 4096, 32, 32, 128, 128),
          "d256 16K": (1, 16384, 16, 16, 256, 256)}
CALLS = {"fp8 plain": lambda m, q, k, v: m.quantize_fp8_fused(q, k, v),
         "fp8 hadamard": lambda m, q, k, v: m.quantize_fp8_fused(q, k, v, hadamard=True),
         "fp8 smooth+had": lambda m, q, k, v: m.quantize_fp8_fused(q, k, v, smooth_k=True, hadamard=True),
         "int8qk": lambda m, q, k, v: m.quantize_int8_qk_fused(q, k, v)}


def load(path: str):
    spec = importlib.util.spec_from_file_location("quantize_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _bytes(x) -> list:
    return [t.view(torch.uint8) for t in (x.q, x.k, x.v)] + [x.q_descale, x.k_descale, x.v_descale]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    versions = {"before": load(argv[0]), "now": now}
    out = []
    for case, (B, S, Hq, Hkv, D, Dv) in SHAPES.items():
        q, k, v = (t.bfloat16() for t in make("realistic", B, S, Hq, Hkv, D, Dv, seed=1, device="cuda"))
        dst = [torch.empty_like(t) for t in (q, k, v)]

        def copy():
            for d_, s_ in zip(dst, (q, k, v)):
                d_.copy_(s_)
        rec = {"case": case, "shape": [B, S, Hq, Hkv, D, Dv], "copy_ms": median_ms(copy)}
        for call, fn in CALLS.items():
            got = {name: _bytes(fn(m, q, k, v)) for name, m in versions.items()}
            rec[f"{call} same"] = all(torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0))
                                      for a, b in zip(got["before"], got["now"]))
            for name in ("before", "now", "before", "now"):
                m = versions[name]
                rec.setdefault(f"{call} {name} ms", []).append(median_ms(lambda: fn(m, q, k, v)))
        out.append(rec)
        print(json.dumps(rec), flush=True)
    for r in out:
        print(f"{r['case']:22s} copy {r['copy_ms']:.3f} ms; " + "; ".join(
            f"{c} {min(r[f'{c} before ms']):.3f} -> {min(r[f'{c} now ms']):.3f}"
            + ("" if r[f"{c} same"] else " DIFFERENT") for c in CALLS))
    if len(argv) > 1:
        with open(argv[1], "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
