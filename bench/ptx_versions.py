"""Versions of the generated Hopper kernel timed beside FA3 FP8 and the Triton kernel in one
process, for the predict / change / measure log in bench/PTX_NOTES.md.

    python bench/ptx_versions.py --out DIR [--cases "Mistral-7B 16K,d128 32 heads 32K"] [--variants REGEX]

Times every (P rule, row-sum) variant of zyfa.asm.ptx on realistic activations, with the
kernel-only error against float64 on the FP8 values read, the V^T permutation alone, and
the anchors; prints a table last and writes DIR/ptx_versions.json.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import zyfa  # noqa: E402
from zyfa.asm.ptx import attention as attn  # noqa: E402
from zyfa.asm.ptx.kernels import attention_fp8, permuted_vt  # noqa: E402
from zyfa.bench.cases import model_cases  # noqa: E402
from zyfa.bench.measure import median_ms, rel_err  # noqa: E402
from zyfa.bench.methods import all_methods  # noqa: E402
from zyfa.bench.run import case_inputs, versions  # noqa: E402


def variants(inp, wanted):
    """label -> call for every variant whose label matches ``wanted`` (a regex), and FA3 FP8."""
    x = inp.fp8("head")
    kw = dict(x.kwargs(), softmax_scale=inp.scale, causal=inp.case.causal)
    out = {f"ptx-{rule}-rowsum_{rs}": (lambda rule=rule, rs=rs: attention_fp8(**kw, p_rule=rule, rowsum=rs))
           for rule in attn.ATTENTION_RULES for rs in attn.ROWSUMS if rs != "hmma" or rule in attn.HMMA_RULES}
    for rule in attn.HMMA_RULES:
        for schedule in attn.SCHEDULES[1:]:
            out[f"ptx-{rule}-rowsum_hmma-{schedule}"] = (
                lambda rule=rule, schedule=schedule: attention_fp8(**kw, p_rule=rule, rowsum="hmma", schedule=schedule))
    for rule in ("lean_cubic", "lean_cubic_f16", "exact"):
        out[f"triton-{rule}"] = (lambda rule=rule: zyfa.flash_attn_func(**kw, p_rule=rule, return_lse=True,
                                                                          backend="triton"))
    out = {label: fn for label, fn in out.items() if re.search(wanted, label)}
    fa3 = next(m for m in all_methods() if m.label == "fa3-fp8")
    if fa3.missing() is None:
        out["fa3-fp8"] = fa3.build(inp)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", default="Mistral-7B 16K,d128 32 heads 32K")
    ap.add_argument("--variants", default=".", help="regex over the variant labels (FA3 always runs)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    wanted = a.cases.split(",")
    rows = []
    for case in [c for c in model_cases() if c.name in wanted]:
        inp = case_inputs(case, "cuda")
        ref, _ = inp.reference("head")
        sel = inp.ref_rows()
        x = inp.fp8("head")
        rows.append(dict(case=case.name, label="vt-permutation-only", ms=median_ms(lambda: permuted_vt(x.v))))
        for label, fn in variants(inp, a.variants).items():
            try:
                out, _ = fn()
                rec = dict(case=case.name, label=label, err_kernel=rel_err(out[:, sel], ref), ms=median_ms(fn))
                rec["tflops"] = case.flops / rec["ms"] / 1e9
            except Exception as e:  # noqa: BLE001  (recorded, not dropped)
                rec = dict(case=case.name, label=label, failed=f"{type(e).__name__}: {str(e)[:200]}")
            rows.append(rec)
            print(rec, flush=True)
        del inp
        torch.cuda.empty_cache()
    doc = dict(date=datetime.date.today().isoformat(), gpu=torch.cuda.get_device_name(), versions=versions(None),
               rows=rows)
    with open(os.path.join(a.out, "ptx_versions.json"), "w") as f:
        json.dump(doc, f, indent=1)
    print(f"\n{'case':20s} {'variant':32s} {'TFLOP/s':>8s} {'ms':>8s} {'err':>9s}")
    for r in rows:
        print(f"{r['case']:20s} {r['label']:32s} {r.get('tflops', 0):8.0f} {r.get('ms', 0):8.3f} "
              f"{r.get('err_kernel', float('nan')):9.2e} {r.get('failed', '')}")


if __name__ == "__main__":
    main()
