"""Branch fp8-paged-vt, to delete once measured: FP8 paged caches with packed_vt writing V^T
straight from the pool (only K gathered) against main's gather of K and V (which turns each
page's V^T into rows for packed_vt to turn back), in one process: main's tree under
_exp/main_tree/zyfa imported as zyfa_main, FA3's varlen (contiguous) beside. Outputs must equal
main's and the contiguous call's bit for bit (the same kernels read the same bytes).

    python bench/paged_vt_ab.py OUT.json
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

HQ, HKV, D = 32, 8, 128
rng = random.Random(0)
rows = []
for name, lens in {"bench varlen 16 seqs": list(VARLEN_LENGTHS),
                   "8 x 1K..8K": [rng.randint(1024, 8192) for _ in range(8)],
                   "32 x 64..2048": [rng.randint(64, 2048) for _ in range(32)]}.items():
    n, mx = len(lens), max(lens)
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(sum(lens), HQ, D, device="cuda", generator=g).bfloat16()
    k, v = (torch.randn(sum(lens), HKV, D, device="cuda", generator=g).bfloat16() for _ in range(2))
    x = zyfa.quantize_fp8(q[None], k[None], v[None])
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)
    ds = {f"{t}_descale": getattr(x, f"{t}_descale").expand(n, -1).contiguous() for t in "qkv"}
    flops = sum(2 * HQ * (m * (m + 1) // 2) * 2 * D for m in lens)
    calls = {"contiguous auto": lambda: zyfa.flash_attn_varlen_func(x.q[0], x.k[0], x.v[0], cu, cu, mx, mx, **ds)}
    for page, backend in ((64, "ptx"), (64, "auto"), (128, "auto")):
        kp, vp, table, used = zyfa.varlen.paged_kv_cache(x.k[0], x.v[0], cu.cuda(), page, seed=page)
        table, used = table.cpu(), used.cpu()
        for tree, mod in (("main", zm), ("branch", zyfa)):
            calls[f"paged {page} {backend} {tree}"] = (
                lambda m=mod, b=backend, kp=kp, vp=vp, t=table, u=used: m.flash_attn_varlen_func(
                    x.q[0], kp, vp, cu, None, mx, mx, block_table=t, seqused_k=u, backend=b, **ds))
    v8, cud = x.v[0].contiguous(), cu.cuda()
    calls["fa3 varlen"] = lambda: fa3.flash_attn_varlen_func(x.q[0], x.k[0], v8, cud, cud, mx, mx, causal=True, **ds)
    outs = {c: f() for c, f in calls.items() if not c.startswith("fa3")}
    same = all(torch.equal(outs[f"paged {p} {b} main"], outs[f"paged {p} {b} branch"])
               for p, b in ((64, "ptx"), (64, "auto"), (128, "auto")))
    same_contiguous = all(torch.equal(outs[f"paged {p} auto branch"], outs["contiguous auto"]) for p in (64, 128))
    ms = {}
    for rep in range(2):                        # alternate, best of two medians
        for label, fn in calls.items():
            ms[label] = min(ms.get(label, 1e9), median_ms(fn))
    tf = {k_: flops / v_ / 1e9 for k_, v_ in ms.items()}
    rows.append(dict(batch=name, outputs_equal_main=same, outputs_equal_contiguous=same_contiguous, tflops=tf))
    print(f"{name:20s} equal to main {same}, to contiguous {same_contiguous}\n    TFLOP/s "
          + ", ".join(f"{k_} {v_:.0f}" for k_, v_ in tf.items()), flush=True)
json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), open(sys.argv[1], "w"),
          indent=1)
