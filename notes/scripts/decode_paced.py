"""Run 66 (session r): are run 65's slow E4M3 decode rounds (8 x 32K, 32 x 8K) host-paced? Each
zyfa E4M3 decode call eagerly (do_bench), as a CUDA graph, and its host time a call (no sync),
FA3 FP8 beside; since session s also a plan_kvcache run of the Gluon backend; GQA 32/8 d128, one query, E4M3 q and cache, per-(sequence, kv head) descales."""
import sys
import time

import torch
from triton.testing import do_bench

import zyfa

sys.path.insert(0, "notes/scripts")
from ab_common import e4m3_decode_inputs, fa3_kvcache  # noqa: E402

fa3 = fa3_kvcache()

torch.manual_seed(0)
for B, S in ((8, 32768), (32, 8192)):
    q, k, v, ds, lens = e4m3_decode_inputs(B, S)
    gb = 2 * k.numel() / 1e9
    calls = {b: (lambda b=b: zyfa.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens, **ds, return_softmax_lse=True,
                                                         backend=b)) for b in ("gluon", "triton")}
    plan = zyfa.plan_kvcache(q, k, v, cache_seqlens=lens, **ds, backend="gluon")     # session s's plan/run
    calls["plan"] = lambda plan=plan: plan.run(q, k, v, **ds, return_softmax_lse=True)
    calls["fa3"] = lambda: fa3(q, k, v, cache_seqlens=lens, **ds)
    for name, fn in calls.items():
        fn(); torch.cuda.synchronize()
        eager = [do_bench(fn, warmup=25, rep=100) for _ in range(3)]
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            fn()
            with torch.cuda.graph(g, stream=s):
                fn()
        torch.cuda.synchronize()
        graph = [do_bench(g.replay, warmup=25, rep=100) for _ in range(3)]
        t0 = time.perf_counter()
        for _ in range(200):
            fn()
        host = (time.perf_counter() - t0) / 200 * 1e6
        torch.cuda.synchronize()
        print(f"{B} x {S // 1024}K {name:7s} eager ms {' '.join(f'{x:.4f}' for x in eager)} | graph "
              f"{' '.join(f'{x:.4f}' for x in graph)} ({gb / min(graph) * 1e3:.0f} GB/s) | host {host:.0f} us a call")

# where the GPU time of one 8 x 32K call goes, kernel by kernel (the decode kernel, the merge)
from torch.profiler import ProfilerActivity, profile  # noqa: E402

B, S = 8, 32768
q, k, v, ds, lens = e4m3_decode_inputs(B, S)
for b in ("gluon", "triton"):
    print(zyfa.explain_kvcache(q, k, v, cache_seqlens=lens, **ds, backend=b).splitlines()[-1])
    fn = lambda b=b: zyfa.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens, **ds, backend=b)  # noqa: E731
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=6))
