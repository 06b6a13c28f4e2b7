"""Short dense calls through the persistent packed kernels: is one CTA an SM drawing tiles
from a list (Layout.tile_counter, the packed variants) faster than one CTA a tile where a
tile has few key blocks? One process, FA3 and SDPA cuDNN beside.

    python notes/ab/short_tiles_ab.py [--out results.json] [--cases d64/64 1K,...]

Each sweep case runs as `zyfa bench` makes it (realistic inputs, causal) through
flash_attn_func(backend="ptx") (dense: one CTA a tile) and through flash_attn_varlen_func
(backend="ptx") with every sequence the case's length (packed: the tile list); BF16 also the
packed kernel with its tables built once (what a dense call would pay if it took that path).
The packed outputs are compared with the dense ones (same tiles, same block order).
Since run 41 a short dense 16-bit call takes the packed kernel itself (kernels.PACKED_ROUTE_KEYS);
"one-cta-a-tile" is the same call with that route turned off.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import torch  # noqa: E402

import zyfa  # noqa: E402
from zyfa.bench.cases import sweep_cases  # noqa: E402
from zyfa.bench.measure import median_ms  # noqa: E402
from zyfa.bench.run import all_methods  # noqa: E402
from zyfa.bench.run import case_inputs  # noqa: E402

CASES = {"bf16": ["d64/64 1K", "d64/64 2K", "d64/64 4K", "d128/128 1K", "d128/128 2K", "d256/256 1K",
                  "d256/256 2K", "d192/128 1K", "d192/128 2K", "d192/128 4K", "d128/128 16K"],
         "fp8": ["d64/64 1K", "d128/128 1K", "d128/128 2K", "d256/256 1K", "d256/256 2K", "d192/128 1K",
                 "d128/128 16K"]}
ANCHORS = {"bf16": ("fa3-bf16", "sdpa_cudnn-bf16"), "fp8": ("fa3-fp8",)}


def _calls(inp, dtype):
    case = inp.case
    B, S = case.B, case.Sq
    cu = torch.arange(0, (B + 1) * S, S, dtype=torch.int32)             # host tensors, as the docs advise
    if dtype == "bf16":
        q, k, v, ds = inp.q, inp.k, inp.v, {}
    else:
        x = inp.fp8("head")
        q, k, v = x.q, x.k, x.v
        ds = {n: getattr(x, n).expand(B, -1).contiguous() for n in ("q_descale", "k_descale", "v_descale")}
    dense_kw = dict(softmax_scale=inp.scale, causal=True, return_lse=True, backend="ptx")
    if dtype == "fp8":
        dense_kw.update(q_descale=x.q_descale, k_descale=x.k_descale, v_descale=x.v_descale)
    flat = [t.reshape(B * S, *t.shape[2:]) for t in (q, k, v)]
    calls = {"dense": lambda: zyfa.flash_attn_func(q, k, v, **dense_kw),
             "packed": lambda: zyfa.flash_attn_varlen_func(*flat, cu, cu, S, S, softmax_scale=inp.scale, causal=True,
                                                           return_lse=True, backend="ptx", **ds)}
    if dtype == "bf16":
        import zyfa.asm.ptx.kernels as K

        def one_cta_a_tile():
            saved, K.PACKED_ROUTE_KEYS = K.PACKED_ROUTE_KEYS, {}
            try:
                return calls["dense"]()
            finally:
                K.PACKED_ROUTE_KEYS = saved
        calls["one-cta-a-tile"] = one_cta_a_tile
        from zyfa.asm.ptx.kernels import attention_16
        from zyfa.varlen import _contiguous_tables
        vp, packed = _contiguous_tables(flat[0], flat[2], [S] * B, [S] * B, list(range(0, B * S, S)), cu.tolist(),
                                        False)
        kq, kk = flat[0].unsqueeze(0), flat[1].unsqueeze(0)
        calls["packed-kernel"] = lambda: attention_16(kq, kk, vp, inp.scale, True, packed=packed)
    return calls


def _as_dense(out, B, S):
    o = out[0] if isinstance(out, tuple) else out
    return o.reshape(B, S, *o.shape[-2:])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dtypes", default="bf16,fp8")
    ap.add_argument("--cases", default=None, help="comma-separated sweep case names (default: CASES)")
    a = ap.parse_args(argv)
    sweep = {c.name: c for c in sweep_cases()}
    methods = {m.label: m for m in all_methods()}
    rows = []
    for dtype, names in CASES.items():
        if dtype not in a.dtypes.split(","):
            continue
        for name in (a.cases.split(",") if a.cases else names):
            case = sweep[name]
            inp = case_inputs(case, "cuda")
            calls = _calls(inp, dtype)
            for label in ANCHORS[dtype]:
                m = methods[label]
                if m.missing() is None:
                    calls[label] = m.build(inp)
            ref = _as_dense(calls["dense"](), case.B, case.Sq).float()
            diffs = {}
            for key in ("packed", "packed-kernel", "one-cta-a-tile"):
                if key in calls:
                    o = _as_dense(calls[key](), case.B, case.Sq).float()
                    diffs[key] = float((o - ref).abs().max())
            times = {key: [] for key in calls}
            for _ in range(a.rounds):
                for key, fn in calls.items():
                    times[key].append(median_ms(fn))
            tf = {key: case.flops / (min(ts) * 1e-3) / 1e12 for key, ts in times.items()}
            rows.append(dict(dtype=dtype, case=name, B=case.B, S=case.Sq, H=case.Hq, tflops=tf,
                             ms={k: min(v) for k, v in times.items()}, max_abs_diff_vs_dense=diffs))
            print(dtype, name, " ".join(f"{k} {v:.0f}" for k, v in tf.items()), "diff", diffs, flush=True)
            del inp, calls
            torch.cuda.empty_cache()
    if a.out:
        meta = dict(date=__import__("datetime").datetime.now().isoformat(timespec="seconds"),
                    gpu=torch.cuda.get_device_name(), torch=torch.__version__)
        with open(a.out, "w") as f:
            json.dump(dict(meta=meta, rows=rows), f, indent=1)
    keys = sorted({k for r in rows for k in r["tflops"]})
    print("\n| dtype | case | " + " | ".join(keys) + " |")
    for r in rows:
        print(f"| {r['dtype']} | {r['case']} | " + " | ".join(f"{r['tflops'].get(k, float('nan')):.0f}" for k in keys)
              + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
