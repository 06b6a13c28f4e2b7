"""Tile configurations of the Triton kernel timed beside FA3 (FP8 and BF16) in one process, for
the predict / change / measure log in bench/NOTES.md.

    python bench/triton_variants.py --out DIR [--cases "Mistral-7B 16K,d128 32 heads 32K"] \
        [--fp8 "64,128,4,3;64,64,4,3,168"] [--bf16 "128,64,8,3;64,64,4,2,168"] [--p-rule exact]
        [--key-order both]

A config is TileConfig.parse's text: block_m,block_n,num_warps,num_stages[,maxnreg].
--key-order both times each FP8 config with and without the wgmma key reorder.
Records each config's registers, spills and shared memory (from the compiled kernel), its
kernel-only error against float64 on realistic activations, whether its output equals the
first FP8 config with the same block_n bit for bit, and TFLOP/s; prints a table last and
writes DIR/triton_variants.json.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from zyfa.bench.cases import model_cases  # noqa: E402
from zyfa.bench.measure import median_ms, rel_err  # noqa: E402
from zyfa.bench.methods import all_methods  # noqa: E402
from zyfa.bench.run import case_inputs, versions  # noqa: E402
from zyfa.triton_kernels.launch import triton_attention  # noqa: E402
from zyfa.triton_kernels.tuning import TileConfig  # noqa: E402


def compiled_kernels() -> list:
    """The attention kernels Triton has compiled in this process, oldest first."""
    from zyfa.triton_kernels.attention import attention_fwd_kernel
    return [k for cache in attention_fwd_kernel.device_caches.values() for k in cache[0].values()]


STATS: dict[tuple, dict] = {}    # (variant label, head dims) -> its kernel's registers, spills, shared memory


def time_one(case, label, fn, ref, rows):
    try:
        before = len(compiled_kernels())
        out, _ = fn()
        torch.cuda.synchronize()
        kernels = compiled_kernels()
        if len(kernels) > before:        # compiled by this call; a later case reuses it
            k = kernels[-1]
            STATS[label, case.D, case.Dv] = dict(registers=k.n_regs, spill_bytes=k.n_spills,
                                                 shared_bytes=k.metadata.shared)
        rec = dict(case=case.name, label=label, **STATS.get((label, case.D, case.Dv), {}))
        rec["err_kernel"] = rel_err(out[:, rows], ref) if ref is not None else None
        rec["ms"] = median_ms(fn)
        rec["tflops"] = case.flops / rec["ms"] / 1e9
        return rec, out
    except Exception as e:  # noqa: BLE001  (recorded, not dropped)
        return dict(case=case.name, label=label, failed=f"{type(e).__name__}: {str(e)[:300]}"), None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", default="Mistral-7B 16K,d128 32 heads 32K")
    ap.add_argument("--fp8", default="64,128,4,3;64,64,4,3,168")
    ap.add_argument("--bf16", default="128,64,8,3;64,64,4,2,168")
    ap.add_argument("--p-rule", default="exact")
    ap.add_argument("--key-order", choices=("auto", "both"), default="auto")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    wanted = a.cases.split(",")
    fp8_cfgs = [TileConfig.parse(t) for t in a.fp8.split(";") if t]
    bf16_cfgs = [TileConfig.parse(t) for t in a.bf16.split(";") if t]
    key_orders = {"auto": [None], "both": [False, True]}[a.key_order]
    anchors = {m.label: m for m in all_methods() if m.label in ("fa3-fp8", "fa3-bf16")}
    rows_out = []
    for case in [c for c in model_cases() if c.name in wanted]:
        inp = case_inputs(case, "cuda")
        rows = inp.ref_rows()
        x = inp.fp8("head")
        kw = dict(softmax_scale=inp.scale, causal=case.causal)
        kref, _ = inp.reference("head")
        first_by_bn = {}
        for cfg, order in ((c, o) for c in fp8_cfgs for o in key_orders):
            fn = (lambda cfg=cfg, order=order: triton_attention(
                x.q, x.k, x.v, q_descale=x.q_descale, k_descale=x.k_descale, v_descale=x.v_descale,
                p_rule=a.p_rule, config=cfg, permute_keys=order, **kw))
            rec, out = time_one(case, f"fp8-{a.p_rule} {cfg} key order {order}", fn, kref, rows)
            if out is not None:
                same = first_by_bn.setdefault(cfg.block_n, out)
                rec["bitwise_equal_first_same_block_n"] = bool(torch.equal(out, same))
            rows_out.append(rec)
            print(rec, flush=True)
        first_by_bn.clear()
        ref, _ = inp.reference(None)
        for cfg in bf16_cfgs:
            fn = lambda cfg=cfg: triton_attention(inp.q, inp.k, inp.v, config=cfg, **kw)  # noqa: E731
            rec, _ = time_one(case, f"bf16 {cfg}", fn, ref, rows)
            rows_out.append(rec)
            print(rec, flush=True)
        for label, m in anchors.items():
            if m.missing() is None:
                built = m.build(inp)
                fn, finish = built if isinstance(built, tuple) else (built, lambda res: res)
                res = finish(fn())
                out = res[0] if isinstance(res, tuple) else res
                err = rel_err(out[:, rows], kref if label.endswith("fp8") else ref)
                ms = median_ms(fn)
                rec = dict(case=case.name, label=label, err_kernel=err, ms=ms, tflops=case.flops / ms / 1e9)
                rows_out.append(rec)
                print(rec, flush=True)
        del inp, x
        torch.cuda.empty_cache()
    doc = dict(date=datetime.datetime.now().isoformat(timespec="seconds"), gpu=torch.cuda.get_device_name(),
               versions=versions(None), rows=rows_out)
    with open(os.path.join(a.out, "triton_variants.json"), "w") as f:
        json.dump(doc, f, indent=1)
    print(f"\n{'case':24s} {'variant':58s} {'regs':>4s} {'smem':>6s} {'err':>9s} {'TFLOP/s':>8s}")
    for r in rows_out:
        print(f"{r['case']:24s} {r['label'][:40] + r['label'][-24:]:64s} {str(r.get('registers', '')):>4s} "
              f"{str(r.get('shared_bytes', '')):>6s} {r.get('err_kernel') or 0:9.2e} "
              f"{r.get('tflops', 0):8.1f} {r.get('failed', '')[:60]}")


if __name__ == "__main__":
    main()
