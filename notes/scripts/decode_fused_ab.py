"""Lab A/B (written in session s, for a GPU session): notes/ab/gluon_decode/fused_merge.py (the split
merge done by the decode kernel's last split) against the package's Gluon launch (decode kernel,
then merge_kernel). Both called at the backend level (no API checks), FA3 FP8 beside.
1. Correctness on a ragged batch with forced splits (dense and paged 64, E4M3 and BF16 q, causal):
   each against float64 (zyfa.spec.kv_cache) beside the package's error, and 100 repeats bit for bit.
2. Speed at 8 x 32K and 32 x 8K (GQA 32/8 d128, one query): do_bench eager, as a CUDA graph, and
   the host's time a call without syncs. Prediction (the lab file's docstring): host -40..50 us a
   split call, graph within 1%."""
import sys
import time

import torch
from triton.testing import do_bench

sys.path.insert(0, "notes/ab/gluon_decode")
sys.path.insert(0, "tests")
sys.path.insert(0, "notes/scripts")
from ab_common import e4m3_decode_inputs, fa3_kvcache  # noqa: E402
from fused_merge import run_fused  # noqa: E402
from zyfa.gluon_kernels.backend import run_decode  # noqa: E402
from zyfa.spec.kv_cache import decode_attention_fp64  # noqa: E402

fa3 = fa3_kvcache()


def rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


from kv_cases import fp8_case  # noqa: E402

lens = [1000, 4099, 17, 1]
for page in (0, 64):
    for q_e4m3 in (True, False):
        q, kc, vc, table, ds = fp8_case(4, 1, 32, 8, 128, lens, page, q_e4m3, seed=11)
        seq = torch.tensor(lens, dtype=torch.int32, device="cuda")
        kw = dict(block_table=table, causal=True, num_splits=5, **ds)
        ref, ref_lse = decode_attention_fp64(q, kc, vc, lens, table, causal=True, **ds)
        base, base_lse = run_decode(q, kc, vc, seq, **kw)
        got, got_lse = run_fused(q, kc, vc, seq, **kw)
        same = all(torch.equal(run_fused(q, kc, vc, seq, **kw)[0].view(torch.int16), got.view(torch.int16))
                   for _ in range(100))
        print(f"page {page} q {'e4m3' if q_e4m3 else 'bf16'}: vs float64 fused {rel(got, ref):.4e} package "
              f"{rel(base, ref):.4e}; lse max diff fused {(got_lse.double() - ref_lse).abs().max():.2e} package "
              f"{(base_lse.double() - ref_lse).abs().max():.2e}; fused vs package {rel(got, base.double()):.2e}; "
              f"100 repeats bit-equal {same}")

torch.manual_seed(0)
for B, S in ((8, 32768), (32, 8192)):
    q, k, v, ds, seq = e4m3_decode_inputs(B, S)
    gb = 2 * k.numel() / 1e9
    calls = {"package": lambda: run_decode(q, k, v, seq, **ds), "fused": lambda: run_fused(q, k, v, seq, **ds),
             "fa3": lambda: fa3(q, k, v, cache_seqlens=seq, **ds)}
    for _ in range(2):                                   # rounds in turns
        for name, fn in calls.items():
            fn()
            torch.cuda.synchronize()
            eager = do_bench(fn, warmup=25, rep=100)
            g = torch.cuda.CUDAGraph()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                fn()
            torch.cuda.current_stream().wait_stream(s)
            with torch.cuda.graph(g):
                fn()
            graph = do_bench(g.replay, warmup=25, rep=100)
            torch.cuda._sleep(50_000_000)
            t0 = time.perf_counter()
            for _ in range(50):
                fn()
            host = (time.perf_counter() - t0) / 50 * 1e6
            torch.cuda.synchronize()
            print(f"{B} x {S // 1024}K {name:8s} eager {eager:.4f} ms | graph {graph:.4f} ms ({gb / graph * 1e3:.0f} GB/s)"
                  f" | host {host:.0f} us a call")
