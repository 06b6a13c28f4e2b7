"""Branch ptx-epilogue-v4, to delete once measured: the generated kernels' epilogue storing
each row's output 16 bytes a thread (a butterfly exchange within each quad, then st.global.v4)
instead of 4 bytes, against main's, in one process: main's tree under _exp/main_tree/zyfa
imported as zyfa_main, FA3 beside. Outputs must be bit for bit equal (the same values land in
the same places; checked first on edge shapes: odd lengths, one query, packed batches).

    python bench/epilogue_ab.py OUT.json
"""
import importlib.util, json, os, sys
import torch
import zyfa
from zyfa.activations import make
from zyfa.bench.cases import attention_flops
from zyfa.bench.measure import median_ms
import zyfa.asm.ptx.kernels as branch
import fa3_fwd_interface as fa3

MAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "_exp", "main_tree", "zyfa")
spec = importlib.util.spec_from_file_location("zyfa_main", os.path.join(MAIN, "__init__.py"),
                                              submodule_search_locations=[MAIN])
sys.modules["zyfa_main"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sys.modules["zyfa_main"])
import zyfa_main                                                            # noqa: E402
import zyfa_main.asm.ptx.kernels as main                                   # noqa: E402


def case(dt, B, S, Sk, Hq, Hkv, D, Dv, seed=0):
    q = make("realistic", B, S, Hq, Hkv, D, Dv, seed=seed, device="cuda")[0].bfloat16()
    _, k, v = (t.bfloat16() for t in make("realistic", B, Sk, Hq, Hkv, D, Dv, seed=seed + 1, device="cuda"))
    if dt == "bf16":
        return (lambda m, causal=True: m.attention_16(q, k, v, None, causal),
                lambda: fa3.flash_attn_func(q, k, v, causal=True))
    x = zyfa.quantize_fp8(q, k, v)
    v8 = x.v.contiguous()
    return (lambda m, causal=True: m.attention_fp8(x.q, x.k, x.v, None, causal, x.q_descale, x.k_descale, x.v_descale),
            lambda: fa3.flash_attn_func(x.q, x.k, v8, causal=True, q_descale=x.q_descale, k_descale=x.k_descale,
                                        v_descale=x.v_descale))


checks = []
for dt in ("fp8", "bf16"):
    for B, S, Sk, Hq, Hkv, D, Dv, causal in [(1, 300, 300, 4, 4, 128, 128, True), (1, 77, 513, 4, 1, 128, 128, True),
                                             (1, 1, 100, 4, 2, 128, 128, True), (1, 513, 700, 4, 2, 64, 64, False),
                                             (1, 333, 400, 4, 4, 192, 128, True), (2, 129, 129, 8, 8, 256, 256, True)]:
        run, _ = case(dt, B, S, Sk, Hq, Hkv, D, Dv, seed=S)
        same = all(torch.equal(a_, b_) for a_, b_ in zip(run(main, causal), run(branch, causal)))
        checks.append(dict(dtype=dt, shape=[B, S, Sk, Hq, Hkv, D, Dv, causal], bit_equal=same))
        print(f"check {dt} {B} {S} {Sk} {Hq}/{Hkv} d{D}/{Dv} {'causal' if causal else 'full'}: bit-equal {same}",
              flush=True)
lens = [1, 130, 77, 1000, 4097]
cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)
g = torch.Generator(device="cuda").manual_seed(0)
q = torch.randn(sum(lens), 8, 128, device="cuda", generator=g).bfloat16()
k, v = (torch.randn(sum(lens), 2, 128, device="cuda", generator=g).bfloat16() for _ in range(2))
x = zyfa.quantize_fp8(q[None], k[None], v[None])
ds = {f"{t}_descale": getattr(x, f"{t}_descale").expand(len(lens), -1).contiguous() for t in "qkv"}
for dt, args, kw in (("bf16", (q, k, v), {}), ("fp8", (x.q[0], x.k[0], x.v[0]), ds)):
    outs = [m.flash_attn_varlen_func(*args, cu, cu, max(lens), max(lens), backend="ptx", **kw)
            for m in (zyfa_main, zyfa)]
    same = torch.equal(outs[0], outs[1])
    checks.append(dict(dtype=dt, shape=["packed", lens], bit_equal=same))
    print(f"check {dt} packed {lens}: bit-equal {same}", flush=True)

SHAPES = [("fp8", "Mistral 16K", 1, 16384, 32, 8, 128, 128), ("fp8", "batch 4 4K", 4, 4096, 32, 32, 128, 128),
          ("fp8", "d128 1K", 32, 1024, 16, 16, 128, 128), ("fp8", "d128 2K", 16, 2048, 16, 16, 128, 128),
          ("fp8", "d256 4K", 8, 4096, 8, 8, 256, 256), ("fp8", "MLA 4K", 8, 4096, 16, 16, 192, 128),
          ("bf16", "Mistral 16K", 1, 16384, 32, 8, 128, 128), ("bf16", "batch 4 4K", 4, 4096, 32, 32, 128, 128),
          ("bf16", "d128 1K", 32, 1024, 16, 16, 128, 128), ("bf16", "d128 2K", 16, 2048, 16, 16, 128, 128),
          ("bf16", "d64 1K", 32, 1024, 16, 16, 64, 64), ("bf16", "d256 1K", 32, 1024, 16, 16, 256, 256)]
rows = []
for dt, name, B, S, Hq, Hkv, D, Dv in SHAPES:
    run, fa = case(dt, B, S, S, Hq, Hkv, D, Dv)
    flops = attention_flops(B, Hq, S, S, D, Dv, True)
    same = all(torch.equal(a_, b_) for a_, b_ in zip(run(main), run(branch)))
    ms = {}
    for rep in range(2):                          # alternate, best of two medians
        for label, fn in (("main", lambda: run(main)), ("branch", lambda: run(branch)), ("fa3", fa)):
            ms[label] = min(ms.get(label, 1e9), median_ms(fn))
    tf = {k_: flops / v_ / 1e9 for k_, v_ in ms.items()}
    rows.append(dict(dtype=dt, case=name, tflops=tf, bit_equal=same))
    print(f"{dt:4s} {name:14s} main {tf['main']:5.0f}  branch {tf['branch']:5.0f} ({tf['branch'] / tf['main'] - 1:+.1%})"
          f"  FA3 {tf['fa3']:5.0f}  bit-equal {same}", flush=True)
    torch.cuda.empty_cache()
json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, checks=checks, rows=rows),
          open(sys.argv[1], "w"), indent=1)
