"""One quantizer form against another, in one process: the division by a row's reciprocal
(zyfa.triton_kernels.quantize._quotient, FMA_DIV) against the IEEE division an element it
replaced, which the same kernels still compile to where FMA_DIV is off (as under the
interpreter).

    python bench/quantizer_ab.py [OUT.json]

For each shape and call (quantize_fp8 plain and hadamard, quantize_int8_qk), both forms'
bytes and descales must be equal; then each one's median time, alternated twice, beside a
copy of q, k and v.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402

import zyfa  # noqa: E402
import zyfa.triton_kernels.quantize as Q  # noqa: E402
from zyfa.activations import make  # noqa: E402
from zyfa.bench.measure import median_ms  # noqa: E402

SHAPES = {"Mistral-7B 16K": (1, 16384, 32, 8, 128, 128), "DeepSeek-V2-Lite 16K": (1, 16384, 16, 16, 192, 128),
          "d128 32 heads 32K": (1, 32768, 32, 32, 128, 128), "d128 batch 4 4K": (4, 4096, 32, 32, 128, 128),
          "d256 16K": (1, 16384, 16, 16, 256, 256)}
CALLS = {"fp8 plain": lambda q, k, v: zyfa.quantize_fp8(q, k, v),
         "fp8 hadamard": lambda q, k, v: zyfa.quantize_fp8(q, k, v, hadamard=True),
         "int8qk": lambda q, k, v: zyfa.quantize_int8_qk(q, k, v)}


@contextlib.contextmanager
def form(name):
    """'rcp': the quantizer as it is; 'div': its kernels compiled with FMA_DIV off."""
    active = Q.interpreter_active
    if name == "div":
        Q.interpreter_active = lambda: True
    try:
        yield
    finally:
        Q.interpreter_active = active


def _bytes(x) -> list:
    return [t.view(torch.uint8) if t.element_size() == 1 else t for t in (x.q, x.k, x.v)] + \
        [x.q_descale, x.k_descale, x.v_descale]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out = []
    for case, (B, S, Hq, Hkv, D, Dv) in SHAPES.items():
        q, k, v = (t.bfloat16() for t in make("realistic", B, S, Hq, Hkv, D, Dv, seed=1, device="cuda"))
        dst = [torch.empty_like(t) for t in (q, k, v)]

        def copy():
            for d_, s_ in zip(dst, (q, k, v)):
                d_.copy_(s_)
        rec = {"case": case, "shape": [B, S, Hq, Hkv, D, Dv], "copy_ms": median_ms(copy)}
        for call, fn in CALLS.items():
            got = {}
            for name in ("div", "rcp"):
                with form(name):
                    got[name] = _bytes(fn(q, k, v))
            rec[f"{call} same"] = all(torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0)) if a.is_floating_point()
                                      else torch.equal(a, b) for a, b in zip(got["div"], got["rcp"]))
            for name in ("div", "rcp", "div", "rcp"):
                with form(name):
                    rec.setdefault(f"{call} {name} ms", []).append(median_ms(lambda: fn(q, k, v)))
        out.append(rec)
        print(json.dumps(rec), flush=True)
    for r in out:
        print(f"{r['case']:22s} copy {r['copy_ms']:.3f} ms; " + "; ".join(
            f"{c} {min(r[f'{c} div ms']):.3f} -> {min(r[f'{c} rcp ms']):.3f}" + ("" if r[f"{c} same"] else " DIFFERENT")
            for c in CALLS))
    if argv:
        with open(argv[0], "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
