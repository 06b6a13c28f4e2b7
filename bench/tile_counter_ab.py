"""Branch ptx-packed-tile-counter, to delete once measured: packed (varlen) batches on the
persistent generated kernels (16-bit, FP8 d256 / MLA) drawing their tiles from a counter in
the host's order (non-empty tiles, most keys first), against main's fixed stride, in one process: main's tree under
_exp/main_tree/zyfa imported as zyfa_main, FA3's varlen beside. Outputs must equal main's bit
for bit (each tile's arithmetic is unchanged; only which CTA runs it changes).

    python bench/tile_counter_ab.py OUT.json
"""
import importlib.util, json, os, random, sys
import torch
import zyfa
from zyfa.bench.cases import VARLEN_LENGTHS
from zyfa.bench.measure import median_ms
import fa3_fwd_interface as fa3

MAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "_exp", "main_tree", "zyfa")
spec = importlib.util.spec_from_file_location("zyfa_main", os.path.join(MAIN, "__init__.py"),
                                              submodule_search_locations=[MAIN])
zm = importlib.util.module_from_spec(spec)
sys.modules["zyfa_main"] = zm
spec.loader.exec_module(zm)

rng = random.Random(0)
BATCHES = {"bench varlen 16 seqs": list(VARLEN_LENGTHS), "8 x 1K..8K": [rng.randint(1024, 8192) for _ in range(8)],
           "32 x 64..2048": [rng.randint(64, 2048) for _ in range(32)]}
# (dtype, heads, kv heads, Dqk, Dv): the 16-bit d128 and d64 kernels, FP8's persistent ones
SHAPES = [("bf16", 32, 8, 128, 128), ("bf16", 16, 16, 64, 64), ("bf16", 16, 16, 192, 128),
          ("fp8", 16, 16, 256, 256), ("fp8", 16, 16, 192, 128)]
rows = []
for dt, hq, hkv, d, dv in SHAPES:
    for name, lens in BATCHES.items():
        if dt == "fp8" and name != "bench varlen 16 seqs":
            continue
        n, mx = len(lens), max(lens)
        g = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(sum(lens), hq, d, device="cuda", generator=g).bfloat16()
        k = torch.randn(sum(lens), hkv, d, device="cuda", generator=g).bfloat16()
        v = torch.randn(sum(lens), hkv, dv, device="cuda", generator=g).bfloat16()
        cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)
        cud = cu.cuda()
        if dt == "fp8":
            x = zyfa.quantize_fp8(q[None], k[None], v[None])
            ds = {f"{t}_descale": getattr(x, f"{t}_descale").expand(n, -1).contiguous() for t in "qkv"}
            args, v8 = (x.q[0], x.k[0], x.v[0]), x.v[0].contiguous()
            fa = lambda: fa3.flash_attn_varlen_func(x.q[0], x.k[0], v8, cud, cud, mx, mx, causal=True, **ds)
        else:
            ds, args = {}, (q, k, v)
            fa = lambda: fa3.flash_attn_varlen_func(q, k, v, cud, cud, mx, mx, causal=True)
        calls = {tree: (lambda m=m: m.flash_attn_varlen_func(*args, cu, cu, mx, mx, backend="ptx", **ds))
                 for tree, m in (("main", zm), ("branch", zyfa))}
        same = torch.equal(calls["main"](), calls["branch"]())
        try:
            fa()
            calls["fa3 varlen"] = fa
        except Exception as e:  # noqa: BLE001  (FA3 may not take every head dim)
            print(f"FA3 varlen d{d}/{dv}: {type(e).__name__}: {str(e)[:100]}", flush=True)
        ms = {}
        for rep in range(2):                        # alternate, best of two medians
            for label, fn in calls.items():
                ms[label] = min(ms.get(label, 1e9), median_ms(fn))
        flops = sum(2 * hq * (m * (m + 1) // 2) * (d + dv) for m in lens)
        tf = {k_: flops / v_ / 1e9 for k_, v_ in ms.items()}
        rows.append(dict(dtype=dt, dims=[d, dv], heads=[hq, hkv], batch=name, outputs_equal_main=same, tflops=tf))
        fa3_tf = tf.get("fa3 varlen", float("nan"))
        print(f"{dt:4s} d{d}/{dv} {hq}/{hkv} {name:20s} main {tf['main']:5.0f}  branch {tf['branch']:5.0f} "
              f"({tf['branch'] / tf['main'] - 1:+.1%})  FA3 varlen {fa3_tf:5.0f}  equal {same}", flush=True)
        torch.cuda.empty_cache()
json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), open(sys.argv[1], "w"),
          indent=1)

