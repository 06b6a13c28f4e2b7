"""mbarrier waits with a suspend-time hint: does a waiting warp that sleeps (NANOSLEEP.SYNCS
until the barrier's phase completes) instead of re-polling leave more issue slots to the
warps doing the math? One process: main's generated kernels and the same PTX with
`mbarrier.try_wait.parity ... , HINT_NS` on every wait, FA3 beside; outputs must be
bit-equal (a wait's result does not change).

    python bench/wait_hint_ab.py [--out results.json] [--rounds 3]
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402

import zyfa.asm.ptx.kernels as K  # noqa: E402
from zyfa.asm.ptx import attention as attn  # noqa: E402
from zyfa.asm.ptx.assemble import assemble  # noqa: E402
from zyfa.asm.ptx.loader import Kernel  # noqa: E402
from zyfa.bench.cases import model_cases, sweep_cases  # noqa: E402
from zyfa.bench.measure import median_ms  # noqa: E402
from zyfa.bench.methods import all_methods  # noqa: E402
from zyfa.bench.run import case_inputs  # noqa: E402

HINT_NS = 10_000_000          # 10 ms: the wait ends when the phase completes, long before
WAIT = re.compile(r"(mbarrier\.try_wait\.parity\.shared::cta\.b64 [^;]*?)\s*;")
CASES = [("bf16", "Mistral-7B 16K"), ("bf16", "d128 batch 4 4K"), ("bf16", "d128/128 1K"), ("bf16", "d64/64 16K"),
         ("bf16", "DeepSeek-V2-Lite 16K"), ("bf16", "d256/256 16K"),
         ("fp8", "Mistral-7B 16K"), ("fp8", "d128/128 8K"), ("fp8", "d128 batch 4 4K"), ("fp8", "d128/128 1K"),
         ("fp8", "DeepSeek-V2-Lite 16K"), ("fp8", "d256/256 16K"), ("fp8", "d64/64 16K")]


def hinted(ptx: str) -> str:
    out, n = WAIT.subn(rf"\1, {HINT_NS};", ptx)
    assert n > 0, "no mbarrier wait found"
    return out


@functools.cache
def _fp8_hint(rule, causal, dqk, arch, device, packed, long=False):
    name, ptx = attn.attention_kernel(rule, causal, dqk, arch, packed, long=long)
    return Kernel(assemble(hinted(ptx), arch).cubin, name, torch.device("cuda", device),
                  attn.layout_for(dqk, dv=attn.fp8_dv(dqk), packed=packed, long=long).shared_bytes)


@functools.cache
def _b16_hint(dtype, causal, dqk, dv, arch, device, packed):
    name, ptx = attn.attention_kernel_16(dtype, causal, dqk, dv, arch, packed)
    return Kernel(assemble(hinted(ptx), arch).cubin, name, torch.device("cuda", device),
                  attn.layout_for(dqk, dtype, dv, packed).shared_bytes)


MAIN = (K._attention, K._attention_16)
HINT = (_fp8_hint, _b16_hint)


def _use(kernels):
    K._attention, K._attention_16 = kernels


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    cases = {c.name: c for c in model_cases() + sweep_cases()}
    methods = {m.label: m for m in all_methods()}
    rows = []
    for dtype, name in CASES:
        case = cases[name]
        inp = case_inputs(case, "cuda")
        if dtype == "fp8":
            kw = dict(inp.fp8("head").kwargs(), softmax_scale=inp.scale, causal=True)
            call = functools.partial(K.attention_fp8, **kw)
            anchor = methods["fa3-fp8"]
        else:
            call = functools.partial(K.attention_16, inp.q, inp.k, inp.v, inp.scale, True)
            anchor = methods["fa3-bf16"]
        outs = {}
        for label, kernels in (("main", MAIN), ("hint", HINT)):
            _use(kernels)
            outs[label] = call()
        equal = all(torch.equal(x, y) for x, y in zip(outs["main"], outs["hint"]))
        times = {"main": [], "hint": [], "fa3": []}
        fa3 = anchor.build(inp) if anchor.missing() is None else None
        for _ in range(a.rounds):
            for label, kernels in (("main", MAIN), ("hint", HINT)):
                _use(kernels)
                times[label].append(median_ms(call))
            if fa3 is not None:
                times["fa3"].append(median_ms(fa3))
        _use(MAIN)
        tf = {k: case.flops / (min(v) * 1e-3) / 1e12 for k, v in times.items() if v}
        rows.append(dict(dtype=dtype, case=name, bit_equal=equal, tflops=tf, ms=times))
        print(f"{dtype} {name}: main {tf['main']:.0f} hint {tf['hint']:.0f} ({tf['hint'] / tf['main'] - 1:+.1%})"
              f" fa3 {tf.get('fa3', float('nan')):.0f} bit_equal {equal}", flush=True)
        del inp, outs
        torch.cuda.empty_cache()
    if a.out:
        meta = dict(date=__import__("datetime").datetime.now().isoformat(timespec="seconds"),
                    gpu=torch.cuda.get_device_name(), torch=torch.__version__, hint_ns=HINT_NS)
        with open(a.out, "w") as f:
            json.dump(dict(meta=meta, rows=rows), f, indent=1)
    print("\n| dtype | case | main | hint | change | FA3 | bit-equal |\n|---|---|---|---|---|---|---|")
    for r in rows:
        t = r["tflops"]
        print(f"| {r['dtype']} | {r['case']} | {t['main']:.0f} | {t['hint']:.0f} | {t['hint'] / t['main'] - 1:+.1%} | "
              f"{t.get('fa3', float('nan')):.0f} | {r['bit_equal']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
