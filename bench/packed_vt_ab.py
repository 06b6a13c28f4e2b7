"""Branch fp8-packed-vt-coalesced, to delete once measured: a packed FP8 batch's V^T by main's
launch (per-slot keys: a warp's loads run along columns) against this branch's (runs of 16
keys said to the compiler: along keys); the bytes must be equal. Then flash_attn_varlen_func
from main's tree and this branch's in one process (outputs bit-equal), FA3's varlen beside:
ptx, auto, and paged caches (pages of 64 gathered for the generated kernel, 128 by auto: main
reads them in place with Triton, this branch (with fp8-paged-gather) gathers them).

    python bench/packed_vt_ab.py OUT.json      (main's tree under _exp/main_tree/zyfa)
"""
import importlib.util, json, os, random, sys
import torch
import zyfa
from zyfa.bench.cases import VARLEN_LENGTHS
from zyfa.bench.measure import median_ms
from zyfa.hopper_vt import packed_vt
import fa3_fwd_interface as fa3

MAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "_exp", "main_tree", "zyfa")
spec = importlib.util.spec_from_file_location("zyfa_main", os.path.join(MAIN, "__init__.py"),
                                              submodule_search_locations=[MAIN])
zm = importlib.util.module_from_spec(spec)
sys.modules["zyfa_main"] = zm
spec.loader.exec_module(zm)
from zyfa_main.hopper_vt import packed_vt as main_packed_vt          # noqa: E402

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
    starts = [0] + torch.tensor(lens).cumsum(0).tolist()[:-1]
    vt = {(t, o): (lambda f=f, o=o: f(x.v[0], starts, lens, o)[0])
          for t, f in (("main", main_packed_vt), ("branch", packed_vt)) for o in (True, False)}
    same_vt = all(torch.equal(vt[("main", o)]().view(torch.uint8), vt[("branch", o)]().view(torch.uint8))
                  for o in (True, False))
    t_vt = {f"{t} {'key order' if o else 'natural'}": median_ms(f) * 1e3 for (t, o), f in vt.items()}
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)
    cud = cu.cuda()
    ds = {f"{t}_descale": getattr(x, f"{t}_descale").expand(n, -1).contiguous() for t in "qkv"}
    flops = sum(2 * HQ * (m * (m + 1) // 2) * 2 * D for m in lens)
    v8 = x.v[0].contiguous()
    calls = {}
    for label, backend in (("ptx", "ptx"), ("auto", "auto")):
        for tree, mod in (("main", zm), ("branch", zyfa)):
            calls[f"{label} {tree}"] = (lambda m=mod, b=backend: m.flash_attn_varlen_func(
                x.q[0], x.k[0], x.v[0], cu, cu, mx, mx, backend=b, **ds))
    for page, backend in ((64, "ptx"), (128, "auto")):
        kp, vp, table, used = zyfa.varlen.paged_kv_cache(x.k[0], x.v[0], cud, page, seed=page)
        table, used = table.cpu(), used.cpu()
        for tree, mod in (("main", zm), ("branch", zyfa)):
            calls[f"paged {page} {backend} {tree}"] = (lambda m=mod, b=backend, kp=kp, vp=vp, t=table, u=used:
                                                       m.flash_attn_varlen_func(x.q[0], kp, vp, cu, None, mx, mx,
                                                                                block_table=t, seqused_k=u,
                                                                                backend=b, **ds))
    calls["fa3"] = lambda: fa3.flash_attn_varlen_func(x.q[0], x.k[0], v8, cud, cud, mx, mx, causal=True, **ds)
    same = all(torch.equal(calls[f"{c} main"]()[0], calls[f"{c} branch"]()[0])
               for c in ("ptx", "auto", "paged 64 ptx"))
    # branch fp8-paged-gather: auto gathers pages of 128 for the generated kernel (main reads them
    # in place with Triton), so its output must equal the contiguous auto call's
    same = same and torch.equal(calls["paged 128 auto branch"]()[0], calls["auto branch"]()[0])
    ms = {}
    for rep in range(2):                        # alternate, best of two medians
        for label, fn in calls.items():
            ms[label] = min(ms.get(label, 1e9), median_ms(fn))
    tf = {k_: flops / v_ / 1e9 for k_, v_ in ms.items()}
    rows.append(dict(batch=name, vt_us=t_vt, vt_bytes_equal=same_vt, outputs_equal=same, tflops=tf))
    print(f"{name:20s} V^T us " + ", ".join(f"{k_} {v_:.0f}" for k_, v_ in t_vt.items())
          + f"; bytes equal {same_vt}; outputs equal {same}", flush=True)
    print("    TFLOP/s " + ", ".join(f"{k_} {v_:.0f}" for k_, v_ in tf.items()), flush=True)
json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), open(sys.argv[1], "w"),
          indent=1)
