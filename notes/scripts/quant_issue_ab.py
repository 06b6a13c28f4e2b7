"""Lab A/B (not for the package), run 49 (session m): the quantizers before and after the
instruction cuts a SASS study found (helper, session m: the codes launch issues 67-79% of its
instructions' peak rate, so fewer instructions an element are its lever): butterflies on
(rows, runs, 16) views (strides below 16 in one thread's registers), the row amax as an integer
max of |x|'s bits, the INT8 descale as Markstein's quotient against -RN(1/127), no clamp of the
quotient, non-finite values zeroed once. Same bits by construction; here each call's outputs are
compared byte for byte with the previous module's (loaded from build/lab, BEFORE and
BEFORE_INT8: `git show 5d426a9:zyfa/triton_kernels/quantize.py` and `..quantize_int8.py`), and
both timed in turns (do_bench medians, 5 rounds, fastest kept) at DeepSeek-V2-Lite 16K and
Mistral-7B 16K: zyfa.quantize_int8_qk's fused call and quantize_fp8's with hadamard=True.

    python notes/scripts/quant_issue_ab.py build/lab/quantize_before.py build/lab/quantize_int8_before.py
"""
import importlib.util
import sys

import torch
import triton

import zyfa.triton_kernels.quantize as new_q
from ab_common import fastest_and_median, ms_rounds_in_turns      # notes/scripts, on the path as a script
from zyfa.activations import make
from zyfa.triton_kernels import quantize_int8 as new_i8


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)       # its relative imports resolve in zyfa
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


old_q = load("zyfa.triton_kernels.quantize_before", sys.argv[1])
sys.modules["zyfa.triton_kernels.quantize"] = old_q                  # the old int8 module imports the old one
try:
    old_i8 = load("zyfa.triton_kernels.quantize_int8_before", sys.argv[2])
finally:
    sys.modules["zyfa.triton_kernels.quantize"] = new_q


def tensors(x):
    out = []
    for t in (x if isinstance(x, (tuple, list)) else [getattr(x, f) for f in ("q", "k", "v", "q_descale", "k_descale",
                                                                                 "v_descale")]):
        if isinstance(t, torch.Tensor):
            out.append(t)
        elif isinstance(t, (tuple, list)):
            out.extend(tensors(t))
    return out


def same(a, b):
    ta, tb = tensors(a), tensors(b)
    return len(ta) == len(tb) and all(x.shape == y.shape and torch.equal(x.contiguous().view(torch.uint8),
                                                                          y.contiguous().view(torch.uint8))
                                      for x, y in zip(ta, tb))


print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)
for name, shape in (("DeepSeek-V2-Lite 16K", (1, 16384, 16, 16, 192, 128)), ("Mistral-7B 16K", (1, 16384, 32, 8, 128))):
    q, k, v = (t.bfloat16() for t in make("realistic", *shape, seed=1, device="cuda"))
    runs = {"int8: before": lambda: old_i8.quantize_int8_qk_fused(q, k, v),
            "int8: after": lambda: new_i8.quantize_int8_qk_fused(q, k, v),
            "fp8 rotated: before": lambda: old_q.quantize_fp8_fused(q, k, v, hadamard=True),
            "fp8 rotated: after": lambda: new_q.quantize_fp8_fused(q, k, v, hadamard=True)}
    eq = {"int8": same(runs["int8: before"](), runs["int8: after"]()),
          "fp8 rotated": same(runs["fp8 rotated: before"](), runs["fp8 rotated: after"]())}
    t = ms_rounds_in_turns(runs)
    print(f"{name}: bytes equal before / after: {eq}")
    for n, x in t.items():
        print(f"  {n:22s} {fastest_and_median(x)}")
