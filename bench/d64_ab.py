"""Branch ptx16-d64-three-consumers, to delete once measured: the 16-bit d64 kernel with three
consumer warpgroups (192-row tiles) against main's two (128-row tiles), in one process: main's
tree under _exp/main_tree/zyfa imported as zyfa_main, FA3 BF16 beside. Outputs must be bit for
bit equal to main's (each row's arithmetic is the same; only the tiles differ).

    python bench/d64_ab.py OUT.json
"""
import importlib.util, json, os, sys
import torch
from zyfa.activations import make
from zyfa.bench.cases import attention_flops, sweep_cases
from zyfa.bench.measure import median_ms
import zyfa.asm.ptx.kernels as branch
import fa3_fwd_interface as fa3

MAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "_exp", "main_tree", "zyfa")
spec = importlib.util.spec_from_file_location("zyfa_main", os.path.join(MAIN, "__init__.py"),
                                              submodule_search_locations=[MAIN])
sys.modules["zyfa_main"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sys.modules["zyfa_main"])
import zyfa_main.asm.ptx.kernels as main                                   # noqa: E402

SHAPES = [(c.name, c.B, c.Sq, c.Hq, c.Hkv) for c in sweep_cases(dims=((64, 64),))] + [
    ("d64 GQA 32/8 16K", 1, 16384, 32, 8), ("d64 batch 4 4K", 4, 4096, 32, 32)]
rows = []
for name, B, S, Hq, Hkv in SHAPES:
    q, k, v = (t.bfloat16() for t in make("realistic", B, S, Hq, Hkv, 64, 64, seed=0, device="cuda"))
    flops = attention_flops(B, Hq, S, S, 64, 64, True)
    call = lambda m: m.attention_16(q, k, v, None, True)
    same = all(torch.equal(a_, b_) for a_, b_ in zip(call(main), call(branch)))
    ms = {}
    for rep in range(2):                          # alternate, best of two medians
        for label, fn in (("main", lambda: call(main)), ("three", lambda: call(branch)),
                          ("fa3", lambda: fa3.flash_attn_func(q, k, v, causal=True))):
            ms[label] = min(ms.get(label, 1e9), median_ms(fn))
    tf = {k_: flops / v_ / 1e9 for k_, v_ in ms.items()}
    rows.append(dict(case=name, tflops=tf, bit_equal=same))
    print(f"bf16 {name:18s} main {tf['main']:5.0f}  three consumers {tf['three']:5.0f} "
          f"({tf['three'] / tf['main'] - 1:+.1%})  FA3 {tf['fa3']:5.0f}  bit-equal {same}", flush=True)
    torch.cuda.empty_cache()
json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), open(sys.argv[1], "w"), indent=1)
