"""Branch ptx-uniform-desc, to delete once measured: the generated kernels of each step of
this branch against main's, in one process: each tree under _exp/trees/NAME (git archive of a
commit's zyfa/) imported as package zyfa_NAME without its __init__, "main" the anchor, FA3
beside. Outputs must be bit for bit equal to main's (the arithmetic is unchanged).

    python bench/uniform_ab.py OUT.json
"""
import importlib, json, os, sys, types
import torch
import zyfa
from zyfa.activations import make
from zyfa.bench.cases import attention_flops
from zyfa.bench.measure import median_ms
import fa3_fwd_interface as fa3

TREES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "_exp", "trees")
trees = {}
for name in ["main"] + sorted(n for n in os.listdir(TREES) if n != "main"):
    pkg = types.ModuleType(f"zyfa_{name}")
    pkg.__path__ = [os.path.join(TREES, name, "zyfa")]
    sys.modules[f"zyfa_{name}"] = pkg
    trees[name] = importlib.import_module(f"zyfa_{name}.asm.ptx.kernels")

SHAPES = [  # name, dtype, B, S, Hq, Hkv, D, Dv
    ("Mistral 16K", "bf16", 1, 16384, 32, 8, 128, 128), ("d128 32 heads 32K", "bf16", 1, 32768, 32, 32, 128, 128),
    ("batch 4 4K", "bf16", 4, 4096, 32, 32, 128, 128), ("DeepSeek MLA 16K", "bf16", 1, 16384, 16, 16, 192, 128),
    ("d64 16K", "bf16", 1, 16384, 32, 32, 64, 64), ("d256 16K", "bf16", 1, 16384, 16, 16, 256, 256),
    ("DeepSeek MLA 16K", "fp8", 1, 16384, 16, 16, 192, 128), ("d256 16K", "fp8", 1, 16384, 16, 16, 256, 256),
    ("Mistral 16K", "fp8", 1, 16384, 32, 8, 128, 128)]
rows = []
for name, dt, B, S, Hq, Hkv, D, Dv in SHAPES:
    q, k, v = (t.bfloat16() for t in make("realistic", B, S, Hq, Hkv, D, Dv, seed=0, device="cuda"))
    flops = attention_flops(B, Hq, S, S, D, Dv, True)
    if dt == "bf16":
        call = lambda m: m.attention_16(q, k, v, None, True)
        fa = lambda: fa3.flash_attn_func(q, k, v, causal=True)
    else:
        x = zyfa.quantize_fp8(q, k, v)
        call = lambda m: m.attention_fp8(x.q, x.k, x.v, None, True, x.q_descale, x.k_descale, x.v_descale)
        v8 = x.v.contiguous()
        fa = lambda: fa3.flash_attn_func(x.q, x.k, v8, causal=True, q_descale=x.q_descale, k_descale=x.k_descale,
                                         v_descale=x.v_descale)
    # steps 2-4 change only FP8 kernels, steps 3-4 only the serial one (d128): time the trees
    # whose kernel for this shape differs
    names = [n for n in trees if dt == "fp8" and (D == 128 or n not in ("versioned", "deferred"))
             or n in ("main", "uniform")]
    base = call(trees["main"])
    same = {n: all(torch.equal(a_, b_) for a_, b_ in zip(base, call(trees[n]))) for n in names}
    t = {}
    for rep in range(2):                      # alternate, best of two medians
        for label, fn in [(n, (lambda m=trees[n]: call(m))) for n in names] + [("fa3", fa)]:
            t[label] = min(t.get(label, 1e9), median_ms(fn))
    tf = {k_: flops / v_ / 1e9 for k_, v_ in t.items()}
    rows.append(dict(case=name, dtype=dt, tflops=tf, bit_equal=same))
    print(f"{dt:5s} {name:20s} " + "  ".join(f"{n} {tf[n]:5.0f} ({tf[n] / tf['main'] - 1:+.1%})" for n in names)
          + f"  FA3 {tf['fa3']:5.0f}  bit-equal {all(same.values())}", flush=True)
    torch.cuda.empty_cache()
json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), open(sys.argv[1], "w"), indent=1)
