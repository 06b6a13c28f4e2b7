"""Experiment: the FP8 row sum of the rounded P on the tensor cores (P times a ones block)
against BLOCK_N FP8->FP32 conversions and adds per row. Prediction in bench/NOTES.md.

    python bench/rowsum_experiment.py --out DIR
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import sys

import torch
import triton

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import zyfa  # noqa: E402
from zyfa.activations import make  # noqa: E402
from zyfa.bench.cases import attention_flops  # noqa: E402
from zyfa.bench.measure import rel_err  # noqa: E402
from zyfa.reference import attention_fp64, dequantize  # noqa: E402
from zyfa.scales import normalize_descales  # noqa: E402
from zyfa.triton_kernels.launch import triton_attention  # noqa: E402
from zyfa.triton_kernels.tuning import TileConfig  # noqa: E402

CASES = [("B1 H32 32K d128", 1, 32768, 32, 32, 128, 128), ("Mistral-7B 16K", 1, 16384, 32, 8, 128, 128),
         ("DeepSeek-V2-Lite 16K", 1, 16384, 16, 16, 192, 128)]
CONFIGS = [TileConfig(128, 128, 8, 2), TileConfig(128, 128, 8, 3), TileConfig(64, 128, 4, 2)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    a = ap.parse_args()
    rows = []
    for name, B, S, Hq, Hkv, D, Dv in CASES:
        q, k, v = make("realistic", B, S, Hq, Hkv, D, Dv, seed=7, device="cuda")
        x = zyfa.quantize_fp8(q, k, v)
        qs, ks, vs = normalize_descales(x.q, x.k, x.v, x.q_descale, x.k_descale, x.v_descale)
        last = slice(S - 2048, S)
        ref = attention_fp64(dequantize(x.q, qs, "q")[:, last], dequantize(x.k, ks, "k"),
                             dequantize(x.v, vs, "v"), causal=True)
        fl = attention_flops(B, Hq, S, S, D, Dv, True)
        for rule in ("lean_cubic", "lean", "exact"):
            for rowsum in (False, True):
                best = None
                for cfg in CONFIGS:
                    def fn():
                        return triton_attention(**x.kwargs(), p_rule=rule, config=cfg, rowsum_dot=rowsum)
                    try:
                        out, _ = fn()
                        ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
                    except Exception as e:  # noqa: BLE001
                        print(name, rule, rowsum, cfg, "failed", type(e).__name__, str(e)[:120], flush=True)
                        continue
                    if best is None or ms < best[1]:
                        best = (cfg, ms, rel_err(out[:, last], ref))
                if best:
                    r = dict(case=name, p_rule=rule, rowsum_dot=rowsum, config=list(dataclasses.astuple(best[0])), tflops=fl / best[1] / 1e9,
                             err_kernel_last2k=best[2])
                    rows.append(r)
                    print(r, flush=True)
        try:
            import fa3_fwd_interface
            vv = x.v.contiguous()
            ms = triton.testing.do_bench(lambda: fa3_fwd_interface.flash_attn_func(
                x.q, x.k, vv, causal=True, q_descale=x.q_descale, k_descale=x.k_descale, v_descale=x.v_descale),
                warmup=25, rep=100, return_mode="median")
            rows.append(dict(case=name, p_rule="fa3-fp8", rowsum_dot=None, tflops=fl / ms / 1e9))
            print(rows[-1], flush=True)
        except Exception as e:  # noqa: BLE001
            print("FA3 missing:", e)
        del q, k, v, x
        torch.cuda.empty_cache()
    doc = dict(date=datetime.date.today().isoformat(), gpu=torch.cuda.get_device_name(), torch=torch.__version__,
               triton=triton.__version__, records=rows)
    with open(os.path.join(a.out, "rowsum-experiment.json"), "w") as f:
        json.dump(doc, f, indent=1)
    print("\ncase | rule | rows sum on ALUs | on tensor cores | FA3 FP8")
    for name, *_ in CASES:
        fa = next((r["tflops"] for r in rows if r["case"] == name and r["p_rule"] == "fa3-fp8"), 0)
        for rule in ("lean_cubic", "lean", "exact"):
            t = {r["rowsum_dot"]: r["tflops"] for r in rows if r["case"] == name and r["p_rule"] == rule}
            print(f"{name} | {rule} | {t.get(False, 0):.0f} | {t.get(True, 0):.0f} | {fa:.0f}")


if __name__ == "__main__":
    main()
