"""One launch each of a generated Hopper kernel and FA3 (and, for BF16, SDPA cuDNN) on a
`zyfa bench` case, for Nsight Compute: issue slots, tensor pipe, memory, warp stalls.

    ncu --section SpeedOfLight --section SchedulerStats --section WarpStateStats \\
        --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --kernel-name-base demangled \\
        -k regex:"zyfa_attn|FlashAttnFwd|cudnn" --launch-skip 2 --launch-count 2 \\
        python bench/profile_ptx.py --case "Mistral-7B 16K" --dtype bf16

Where in the kernel warps stall (samples per SASS instruction):

    ncu --section SourceCounters --section WarpStateStats -k regex:zyfa_attn --launch-skip 1 \\
        --launch-count 1 -o prof python bench/profile_ptx.py --case "d256/256 16K" --no-fa3
    ncu -i prof.ncu-rep --page source --csv --print-source sass > stalls.csv

ncu names FA3's kernel by its function's base name, device_kernel (a CUTLASS template): the
regex needs the demangled name, which carries FlashAttnFwd. The first call of each is a warm-up
(compilation, caches), the second is the one profiled; the case's head dims pick the kernel's
schedule.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from zyfa.asm.ptx.kernels import attention_16, attention_fp8, attention_int8qk  # noqa: E402
from zyfa.bench.cases import model_cases, sweep_cases  # noqa: E402
from zyfa.bench.run import all_methods  # noqa: E402
from zyfa.bench.run import case_inputs  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", default="Mistral-7B 16K", help="a models or sweep case of zyfa bench")
    ap.add_argument("--dtype", default="fp8", choices=("fp8", "int8", "bf16"),
                    help="int8: the INT8 Q.K^T kernel on quantize_int8_qk's inputs")
    ap.add_argument("--rule", default="exact", help="the FP8 P rule")
    ap.add_argument("--ref-rule", default="block", help="the FP8 reference rule (running: the fast mode)")
    ap.add_argument("--no-fa3", action="store_true", help="the zyfa kernel only")
    a = ap.parse_args()
    case = next(c for c in model_cases() + sweep_cases() if c.name == a.case)
    inp = case_inputs(case, "cuda")
    if a.dtype == "fp8":
        kw = dict(inp.fp8("head").kwargs(), softmax_scale=inp.scale, causal=case.causal)
        runs = [lambda: attention_fp8(**kw, p_rule=a.rule, ref_rule=a.ref_rule)]
        anchors = ("fa3-fp8",)
    elif a.dtype == "int8":
        kw = dict(inp.fp8("int8qk").kwargs(), softmax_scale=inp.scale, causal=case.causal)
        runs = [lambda: attention_int8qk(**kw)]
        anchors = ("fa3-fp8",)
    else:
        runs = [lambda: attention_16(inp.q, inp.k, inp.v, inp.scale, case.causal)]
        anchors = ("fa3-bf16", "sdpa_cudnn-bf16")
    for m in all_methods():
        if m.label in anchors and m.missing() is None and not a.no_fa3:
            runs.append(m.build(inp))
    for _ in range(2):                      # warm-up, then the profiled launch
        for fn in runs:
            fn()
            torch.cuda.synchronize()


if __name__ == "__main__":
    main()
