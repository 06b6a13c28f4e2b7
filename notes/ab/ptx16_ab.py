"""A/B of the generated 16-bit kernel in one process, beside FA3 BF16 and SDPA cuDNN: this tree's
kernel against one or more baseline commits', whose PTX is generated on the CPU beforehand (their
generators are not importable beside this one), each as a dense launch (one CTA a tile) and through the
packed kernel over equal sequences (one CTA an SM over a tile list: the route of a short dense
call, kernels.PACKED_ROUTE_KEYS), and this tree's through zyfa.flash_attn_func ("current
public", as zyfa bench times it); each call's host time beside. Every output is compared bit for
bit with the first baseline's dense one (the variants only reorder loads and waits). Each timed
round starts one call later in the list, so that no call keeps its place in a round (the first
place read 1-3% slower than the same PTX in the second in runs 79-83, notes/PTX_NOTES.md).

    python notes/ab/ptx16_ab.py --prepare-baseline main 4c43bdc   # CPU, writes _exp/ptx16_baseline.json
    python notes/ab/ptx16_ab.py --out results.json                # GPU (carry _exp)
"""
from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, ROOT)
BASELINE = os.path.join(ROOT, "_exp", "ptx16_baseline.json")
# (name, B, S, Hq, Hkv, D, Dv): the models set's BF16 shapes, then the sweep's short cases
SHAPES = [("Mistral-7B 16K", 1, 16384, 32, 8, 128, 128), ("DeepSeek-V2-Lite 16K", 1, 16384, 16, 16, 192, 128),
          ("d128 32 heads 32K", 1, 32768, 32, 32, 128, 128), ("d128 batch 4 4K", 4, 4096, 32, 32, 128, 128),
          ("d64 16K", 2, 16384, 32, 32, 64, 64), ("d256 16K", 2, 16384, 8, 8, 256, 256),
          ("d64 1K", 32, 1024, 32, 32, 64, 64), ("d64 2K", 16, 2048, 32, 32, 64, 64),
          ("d128 1K", 32, 1024, 16, 16, 128, 128), ("d128 2K", 16, 2048, 16, 16, 128, 128),
          ("d128 8K", 4, 8192, 16, 16, 128, 128), ("d192 1K", 32, 1024, 16, 16, 192, 128),
          ("d256 1K", 32, 1024, 8, 8, 256, 256), ("d256 2K", 16, 2048, 8, 8, 256, 256),
          ("d256 4K", 8, 4096, 8, 8, 256, 256), ("d256 8K", 4, 8192, 8, 8, 256, 256),
          ("d192 4K", 8, 4096, 16, 16, 192, 128), ("d64 4K", 8, 4096, 32, 32, 64, 64),
          ("d64 8K", 4, 8192, 32, 32, 64, 64), ("d128 16K", 2, 16384, 16, 16, 128, 128),
          ("Mistral-7B 32K", 1, 32768, 32, 8, 128, 128)]
_GEN = """
import json, sys
from zyfa.asm.ptx.attention import attention_kernel_16, layout_for
out = dict()
for d, dv in {dims}:
    for packed in (False, True):
        name, ptx = attention_kernel_16("bf16", True, d, dv, "sm_90a", packed)
        out[f"{{d}},{{dv}},{{packed}}"] = dict(name=name, ptx=ptx,
                                              shared_bytes=layout_for(d, "bf16", dv, packed).shared_bytes)
json.dump(out, sys.stdout)
"""


def prepare_baseline(refs: list[str]) -> None:
    """Each baseline commit's PTX for SHAPES' head dims, dense and packed, from its own tree (git archive)."""
    dims = sorted({(s[5], s[6]) for s in SHAPES})
    docs = []
    for ref in refs:
        with tempfile.TemporaryDirectory() as tree:
            archive = subprocess.run(["git", "archive", ref, "zyfa"], cwd=ROOT, check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
            env = dict(os.environ, PYTHONPATH=tree)
            r = subprocess.run([sys.executable, "-c", _GEN.format(dims=dims)], cwd=tree, env=env, check=True,
                               capture_output=True, text=True)
        commit = subprocess.run(["git", "rev-parse", ref], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        docs.append(dict(ref=ref, commit=commit, kernels=json.loads(r.stdout)))
        print(f"{ref} {commit[:10]}: head dims {dims}")
    os.makedirs(os.path.dirname(BASELINE), exist_ok=True)
    with open(BASELINE, "w") as f:
        json.dump(dict(baselines=docs), f)
    print(f"wrote {BASELINE}")


def baseline_build(base: dict):
    """A stand-in for kernels._attention_16 that builds a baseline's kernels from its PTX (one
    entry of the file prepare_baseline writes)."""
    import torch

    from zyfa.asm.ptx.assemble import assemble
    from zyfa.asm.ptx.loader import Kernel

    @functools.cache
    def build(dtype, causal, dqk, dv, arch, device, packed):
        k = base["kernels"][f"{dqk},{dv},{packed}"]
        return Kernel(assemble(k["ptx"], arch).cubin, k["name"], torch.device("cuda", device), k["shared_bytes"])
    return build


def dense(q, k, v):
    """The generated 16-bit kernel's dense launch (one CTA a tile), whatever the route would pick."""
    from zyfa.asm.ptx import kernels as K
    saved, K.PACKED_ROUTE_KEYS = K.PACKED_ROUTE_KEYS, {}
    try:
        return K.attention_16(q, k, v)[0]
    finally:
        K.PACKED_ROUTE_KEYS = saved


def routed(q, k, v):
    """The packed kernel over the batch as equal sequences (a short dense call's route), at any length."""
    from zyfa.asm.ptx import kernels as K
    B, S = q.shape[:2]
    out, _ = K.attention_16(*(K._flat(x) for x in (q, k, v)), None, True,
                            K._uniform_batch(B, S, k.shape[1], q.device))
    return out.view(B, S, *out.shape[2:])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prepare-baseline", metavar="REF", nargs="+")
    ap.add_argument("--out", default=None)
    ap.add_argument("--rounds", type=int, default=2,
                    help="alternations of all calls after an untimed one (the fastest kept)")
    ap.add_argument("--shapes", default=None, help="comma-separated SHAPES names (default: all)")
    ap.add_argument("--seed", type=int, default=0, help="the realistic inputs' seed")
    ap.add_argument("--tails", default="", help="comma-separated TAIL_PER_SM_EQUAL values: the public call once "
                    "with each (the packed route's tile order; kernels.py)")
    a = ap.parse_args(argv)
    if a.prepare_baseline:
        prepare_baseline(a.prepare_baseline)
        return 0
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import zyfa
    from zyfa.activations import make
    from zyfa.asm.ptx import attention as attn
    from zyfa.asm.ptx import kernels as K
    from zyfa.asm.ptx.assemble import assemble
    from zyfa.asm.ptx.loader import Kernel
    from zyfa.bench.cases import attention_flops
    from zyfa.bench.measure import host_ms, median_ms, rel_err
    from zyfa.bench.run import versions
    from zyfa.spec.reference import attention_fp64
    with open(BASELINE) as f:
        bases = json.load(f)["baselines"]

    @functools.cache
    def current(dtype, causal, dqk, dv, arch, device, packed):
        name, ptx = attn.attention_kernel_16(dtype, causal, dqk, dv, arch, packed)
        return Kernel(assemble(ptx, arch).cubin, name, torch.device("cuda", device),
                      attn.layout_for(dqk, dtype, dv, packed).shared_bytes)

    def with_tail(tail, fn):
        """fn with kernels.TAIL_PER_SM_EQUAL = tail (a dense call's equal sequences; the
        order's cache key holds it)."""
        saved, K.TAIL_PER_SM_EQUAL = K.TAIL_PER_SM_EQUAL, tail
        try:
            return fn()
        finally:
            K.TAIL_PER_SM_EQUAL = saved

    # labelled by commit (a ref such as HEAD~2 means nothing in the log a week later)
    builds = [(f"baseline {b['commit'][:7]}", baseline_build(b)) for b in bases] + [("current", current)]
    for b in bases:
        print(f"baseline {b['commit'][:7]}: {b['ref']}")
    try:
        import fa3_fwd_interface as fa3
    except ImportError:
        fa3 = None
    names = a.shapes.split(",") if a.shapes else [s[0] for s in SHAPES]
    rows = []
    for name, B, S, Hq, Hkv, D, Dv in (s for s in SHAPES if s[0] in names):
        q, k, v = (t.bfloat16() for t in make("realistic", B, S, Hq, Hkv, D, head_dim_v=Dv, seed=a.seed,
                                              device="cuda"))
        flops = attention_flops(B, Hq, S, S, D, Dv, True)
        last = slice(S - 256, S)
        ref = attention_fp64(q[-1:, last], k[-1:], v[-1:])
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))

        def sdpa():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=True,
                                                                        enable_gqa=Hq != Hkv).transpose(1, 2)
        calls = {}
        for label, build in builds:
            for route, fn in (("dense", dense), ("routed", routed)):
                calls[f"{label} {route}"] = (build, functools.partial(fn, q, k, v))
        # the public call (validation, dispatch, the route), as zyfa bench times it
        calls["current public"] = (current, lambda: zyfa.flash_attn_func(q, k, v, causal=True, return_lse=True,
                                                                         backend="ptx"))
        for tail in (int(x) for x in a.tails.split(",") if x):
            public = calls["current public"][1]
            calls[f"current public tail {tail}"] = (current, functools.partial(with_tail, tail, public))
        if fa3 is not None:
            calls["fa3"] = (None, lambda: fa3.flash_attn_func(q, k, v, causal=True))
        calls["sdpa-cudnn"] = (None, sdpa)
        first, errs, diffs, times = None, {}, {}, {label: [] for label in calls}
        for label, (build, fn) in calls.items():
            if build is not None:
                K._attention_16 = build
            out = fn()
            out = out[0] if isinstance(out, tuple) else out
            errs[label] = rel_err(out[-1:, last], ref)
            if build is not None:
                first = out if first is None else first
                diffs[label] = float((out.float() - first.float()).abs().max())
        # round 0 is not kept: the GPU idled while cuDNN built its plans, and the first call timed
        # after an idle GPU ran 5-10% faster than in later rounds (notes/PTX_NOTES.md, run 68)
        order = list(calls.items())
        for r in range(a.rounds + 1):
            for label, (build, fn) in order[r % len(order):] + order[:r % len(order)]:
                if build is not None:
                    K._attention_16 = build
                ms = median_ms(fn)
                if r:
                    times[label].append(ms)
        for label in calls:
            ms = min(times[label])
            if calls[label][0] is not None:
                K._attention_16 = calls[label][0]
            rows.append(dict(case=name, label=label, ms=ms, ms_rounds=times[label], tflops=flops / ms / 1e9,
                             host_us=host_ms(calls[label][1]) * 1e3, err_last_rows=errs[label],
                             max_abs_diff_vs_baseline_dense=diffs.get(label)))
        print(f"{name:22s} " + " | ".join(f"{lb}={flops / min(times[lb]) / 1e9:.0f}" for lb in calls)
              + f" | max diffs {max(diffs.values()):.1e} | host us "
              + " ".join(f"{r['label']}={r['host_us']:.0f}" for r in rows[-len(calls):]), flush=True)
        torch.cuda.empty_cache()
    if a.out:
        meta = dict(date=datetime.datetime.now().isoformat(timespec="seconds"), gpu=torch.cuda.get_device_name(),
                    baselines=[b["commit"] for b in bases], **versions(None))
        with open(a.out, "w") as f:
            json.dump(dict(meta=meta, rows=rows), f, indent=1)
    # the summary by the mean of the timed rounds, the statistic the notes compare (the fastest
    # round swung 5-20% in run 74, notes/PTX_NOTES.md)
    labels = list(dict.fromkeys(r["label"] for r in rows))
    print("\nTFLOP/s, mean of the timed rounds\n| case | " + " | ".join(labels) + " |")
    for case in dict.fromkeys(r["case"] for r in rows):
        tf = {r["label"]: r["tflops"] * r["ms"] * len(r["ms_rounds"]) / sum(r["ms_rounds"])
              for r in rows if r["case"] == case}
        print(f"| {case} | " + " | ".join(f"{tf.get(lb, float('nan')):.0f}" for lb in labels) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
