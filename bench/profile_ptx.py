"""One launch each of the generated Hopper kernel and FA3 FP8 on a model shape, for Nsight
Compute (issue 6's profile evidence: issue slots, tensor pipe, memory, warp stalls):

    ncu --section SpeedOfLight --section SchedulerStats --section WarpStateStats \\
        --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \\
        -k regex:"zyfa_attn|FlashAttnFwd" --launch-skip 2 --launch-count 2 \\
        python bench/profile_ptx.py --case "d128 32 heads 32K" --rule lean_cubic_f16

The first call of each is a warm-up (compilation, caches), the second is the one profiled;
the case's head dims pick the kernel's schedule. ``--no-fa3`` leaves FA3 out.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from zyfa.asm.ptx.kernels import attention_fp8  # noqa: E402
from zyfa.bench.cases import model_cases  # noqa: E402
from zyfa.bench.methods import all_methods  # noqa: E402
from zyfa.bench.run import case_inputs  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", default="d128 32 heads 32K")
    ap.add_argument("--rule", default="lean_cubic_f16")
    ap.add_argument("--no-fa3", action="store_true")
    a = ap.parse_args()
    case = next(c for c in model_cases() if c.name == a.case)
    inp = case_inputs(case, "cuda")
    x = inp.fp8("head")
    kw = dict(x.kwargs(), softmax_scale=inp.scale, causal=case.causal)
    fa3 = next(m for m in all_methods() if m.label == "fa3-fp8")
    runs = [lambda: attention_fp8(**kw, p_rule=a.rule)]
    if fa3.missing() is None and not a.no_fa3:
        runs.append(fa3.build(inp))
    for _ in range(2):                      # warm-up, then the profiled launch
        for fn in runs:
            fn()
            torch.cuda.synchronize()


if __name__ == "__main__":
    main()
