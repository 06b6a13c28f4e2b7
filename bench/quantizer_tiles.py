"""The FP8 quantizer's tile rows, A/B in one process: 32 rows a tile (BLOCK_S, now) against
tiles of 2048 elements (zyfa.triton_kernels.quantize.tile_rows of the widest head dim, as the
INT8 launch takes them).

    python bench/quantizer_tiles.py [OUT.json]

At head dims 192 and 256 a 32-row tile is 32 x 256 float32 (94 registers a thread in the
quantize pass at d192, ptxas for sm_90a), and `quantize_fp8` took 0.554 ms at
DeepSeek-V2-Lite 16K against 0.184 ms at Mistral-7B 16K for 1.3x the elements. For each shape
and option (plain, hadamard), each tiling's q, k, V^T bytes and descales must equal the
others'; then each one's median time, alternated twice, beside a copy of q, k and v.
"""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import triton  # noqa: E402

import zyfa  # noqa: E402
import zyfa.triton_kernels.quantize as Q  # noqa: E402
from zyfa.activations import make  # noqa: E402
from zyfa.bench.measure import median_ms  # noqa: E402

SHAPES = [(1, 16384, 32, 8, 128, 128), (1, 16384, 16, 16, 192, 128), (1, 16384, 16, 16, 256, 256)]
NOW = Q.BLOCK_S


def _bytes(x) -> list:
    return [x.q.view(torch.uint8), x.k.view(torch.uint8), x.v.view(torch.uint8), x.q_descale, x.k_descale,
            x.v_descale]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out = []
    for B, S, Hq, Hkv, D, Dv in SHAPES:
        q, k, v = (t.bfloat16() for t in make("realistic", B, S, Hq, Hkv, D, Dv, seed=1, device="cuda"))
        dst = [torch.empty_like(t) for t in (q, k, v)]

        def copy():
            for d_, s_ in zip(dst, (q, k, v)):
                d_.copy_(s_)
        rec = {"shape": [B, S, Hq, Hkv, D, Dv], "copy_ms": median_ms(copy)}
        small = Q.tile_rows(max(triton.next_power_of_2(D), triton.next_power_of_2(Dv)))
        for option, kw in (("plain", {}), ("hadamard", {"hadamard": True})):
            want = None
            for name, rows in (("rows32", NOW), (f"rows{small}", small), ("rows32b", NOW), (f"rows{small}b", small)):
                Q.BLOCK_S = rows
                x = zyfa.quantize_fp8(q, k, v, **kw)
                got = _bytes(x)
                if want is None:
                    want = got
                rec[f"{option}_{name}_same"] = all(torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0))
                                                   for a, b in zip(want, got))
                rec[f"{option}_{name}_ms"] = median_ms(lambda: zyfa.quantize_fp8(q, k, v, **kw))
            Q.BLOCK_S = NOW
        out.append(rec)
        print(json.dumps(rec), flush=True)
    for r in out:
        print(f"{str(r['shape']):28s} copy {r['copy_ms']:.3f} ms; " + ", ".join(
            f"{k[:-3]} {v:.3f}" for k, v in r.items() if k.endswith("_ms") and k != "copy_ms")
            + ("" if all(v for k, v in r.items() if k.endswith("_same")) else "  DIFFERENT BITS"))
    if argv:
        with open(argv[0], "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
