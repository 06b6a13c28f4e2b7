"""A/B of the generated 16-bit kernel's variants in one process, beside FA3 BF16 and SDPA cuDNN
(branch bf16-overlap: the options are measured, then the losers are deleted).

    python bench/ptx16_ab.py [--out results.json]
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402

import zyfa  # noqa: E402
from zyfa.activations import make  # noqa: E402
from zyfa.asm.ptx import attention as attn  # noqa: E402
from zyfa.asm.ptx import kernels as K  # noqa: E402
from zyfa.asm.ptx.assemble import assemble  # noqa: E402
from zyfa.asm.ptx.loader import Kernel  # noqa: E402
from zyfa.bench.cases import attention_flops  # noqa: E402
from zyfa.bench.measure import median_ms, rel_err  # noqa: E402
from zyfa.spec.reference import attention_fp64  # noqa: E402

VARIANTS = {"pin": {}, "pin+pingpong": {"pingpong": True}, "no pin (main)": {"pin": False},
            "pin+persistent": {"persistent": True}, "pin+always-rescale": {"always_rescale": True}}
ORIGINAL_GRID = K._grid


def _persistent_grid(layout, Sq, B, Hq):
    """One CTA an SM, each taking tiles t, t + nctaid.x, ... (the specialized kernel's loop)."""
    tiles = ORIGINAL_GRID(layout, Sq, B, Hq)[0]
    return (min(tiles, torch.cuda.get_device_properties(0).multi_processor_count),)
SHAPES = [("Mistral-7B 16K", 1, 16384, 32, 8, 128, 128), ("DeepSeek-V2-Lite 16K", 1, 16384, 16, 16, 192, 128),
          ("d128 32 heads 32K", 1, 32768, 32, 32, 128, 128), ("d128 batch 4 4K", 4, 4096, 32, 32, 128, 128),
          ("d64 16K", 2, 16384, 32, 32, 64, 64)]


_BUILDS: dict = {}


def use(opts: dict) -> None:
    """Make kernels.attention_16 build the variant with ``opts`` (each variant's kernels built once)."""
    opts = dict(opts)
    K._grid = _persistent_grid if opts.pop("persistent", False) else ORIGINAL_GRID
    key = tuple(sorted(opts.items()))
    if key not in _BUILDS:
        @functools.cache
        def build(dtype, causal, dqk, dv, arch, device, packed=False):
            name, ptx = attn.attention_kernel_16(dtype, causal, dqk, dv, arch, **opts)
            return Kernel(assemble(ptx, arch).cubin, name, torch.device("cuda", device),
                          attn.layout_for(dqk, dtype, dv).shared_bytes)
        _BUILDS[key] = build
    K._attention_16 = _BUILDS[key]


def bench(name, B, S, Hq, Hkv, D, Dv, fa3, rows):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q, k, v = (t.bfloat16() for t in make("realistic", B, S, Hq, Hkv, D, head_dim_v=Dv, seed=0, device="cuda"))
    flops = attention_flops(B, Hq, S, S, D, Dv, True)
    last = slice(S - 256, S)
    ref = attention_fp64(q[:, last], k, v)
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))

    def sdpa():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=True,
                                                                    enable_gqa=Hq != Hkv).transpose(1, 2)
    calls = {f"ptx {v_}": (opts, lambda: K.attention_16(q, k, v)[0]) for v_, opts in VARIANTS.items()}
    calls["triton"] = (None, lambda: zyfa.flash_attn_func(q, k, v, backend="triton"))
    if fa3 is not None:
        calls["fa3"] = (None, lambda: fa3.flash_attn_func(q, k, v, causal=True))
    calls["sdpa-cudnn"] = (None, sdpa)
    line = [f"{name:22s}"]
    for label, (opts, fn) in calls.items():
        if opts is not None:
            use(opts)
        out = fn()
        out = out[0] if isinstance(out, tuple) else out
        err = rel_err(out[:, last], ref)
        ms = median_ms(fn)
        rows.append(dict(case=name, label=label, ms=ms, tflops=flops / ms / 1e9, err_last_rows=err))
        line.append(f"{label}={flops / ms / 1e9:.0f} ({err:.2e})")
    print(" | ".join(line), flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    try:
        import fa3_fwd_interface as fa3
    except ImportError:
        fa3 = None
    rows = []
    for shape in SHAPES:
        bench(*shape, fa3, rows)
        torch.cuda.empty_cache()
    if a.out:
        with open(a.out, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
