"""Lab A/B (not for the package), for the next session: the INT8 quantizer's k codes in one sweep
(notes/ab/k_one_sweep.py) against the package's two sweeps run alone, at DeepSeek-V2-Lite 16K and
Mistral-7B 16K. Each variant is timed as quantize_k's whole call (smooth_k's sums launch, the
float32 means' launch where it takes them, the k launch), 5 rounds in turns, do_bench medians;
its codes and descales compared byte for byte with zyfa.quantize_int8_qk's. Prediction (session
m, from ptxas counts, unmeasured): at DeepSeek the two sweeps ~0.25 ms with the sums, one sweep
(2 sub-tiles, 8 warps) 0.17-0.26, + float32 means + the 192 split 0.15-0.23; at Mistral within
0.02 ms of the two sweeps either way.

    PYTHONPATH=.:notes/ab:notes/scripts python3 notes/scripts/k_sweep_ab.py
"""
import torch
import triton

import zyfa
from ab_common import fastest_and_median, ms_rounds_in_turns      # notes/scripts
from k_one_sweep import quantize_k          # notes/ab, on the path
from zyfa.activations import make

VARIANTS = {"two sweeps (package's k)": dict(two_sweeps=True),
            "one sweep, 2 parts, 8 warps": dict(nsplit=2, num_warps=8),
            "one sweep, 2 parts, 8 warps, f32 means": dict(nsplit=2, num_warps=8, mean_f32=True),
            "one sweep, whole block, 16 warps": dict(nsplit=1, num_warps=16)}

print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)
for name, shape in (("DeepSeek-V2-Lite 16K", (1, 16384, 16, 16, 192, 128)), ("Mistral-7B 16K", (1, 16384, 32, 8, 128))):
    q, k, v = (t.bfloat16() for t in make("realistic", *shape, seed=1, device="cuda"))
    want = zyfa.quantize_int8_qk(q, k, v)
    variants = dict(VARIANTS)
    if k.shape[-1] == 192:
        variants["one sweep, 192 split, 2 parts, 8 warps, f32 means"] = dict(nsplit=2, num_warps=8, mean_f32=True,
                                                                            cols192=True)
    runs, equal = {}, {}
    for label, kw in variants.items():
        runs[label] = (lambda kw=kw: quantize_k(k, **kw))
        k8, kd = runs[label]()
        equal[label] = torch.equal(k8, want.k) and torch.equal(kd.nan_to_num(-1.0), want.k_descale.nan_to_num(-1.0))
    print(f"{name}:")
    for label, t in ms_rounds_in_turns(runs).items():
        print(f"  {label:52s} {fastest_and_median(t)}  bytes equal {equal[label]}")
