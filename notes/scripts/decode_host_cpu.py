"""Lab (session s): a zyfa E4M3 decode call's Python time (``--plan``: a plan_kvcache run's) on this CPU, the kernel launches
stubbed out (no GPU here): flash_attn_with_kvcache's checks, problem, selection, the Gluon
backend's buffers and descales. The launches themselves are measured on the GPU (decode_host.py)."""
import sys
import time
import types

import torch

import zyfa
from zyfa import decode
from zyfa.gluon_kernels import backend as gb
from zyfa.gluon_kernels import decode_fp8

_noop = types.SimpleNamespace(__getitem__=None)


class _Stub:
    def __getitem__(self, grid):
        return lambda *a, **k: None


decode_fp8.decode_fp8_kernel = _Stub()
gb.merge_splits = lambda *a, **k: None
gb.supports_decode = lambda p: (True, "stub")
decode.BACKENDS[0] = decode.dispatch.Backend("gluon", gb.supports_decode, gb.run_decode)

B, S = 8, 1024
q = torch.randn(B, 1, 32, 128).to(torch.float8_e4m3fn)
k = torch.randn(B, S, 8, 128).to(torch.float8_e4m3fn)
v = torch.randn(B, S, 8, 128).to(torch.float8_e4m3fn)
ds = {n: torch.full((B, 8), 0.02) for n in ("q_descale", "k_descale", "v_descale")}
lens = torch.full((B,), S, dtype=torch.int32)
if "--plan" in sys.argv:            # a plan's run (zyfa.plan_kvcache), as a decoding step's layers take it
    plan = zyfa.plan_kvcache(q, k, v, cache_seqlens=lens, **ds, backend="gluon")
    fn = lambda: plan.run(q, k, v, **ds, return_softmax_lse=True)  # noqa: E731
else:
    fn = lambda: zyfa.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens, **ds, return_softmax_lse=True,  # noqa: E731
                                              backend="gluon")
for _ in range(200):
    fn()
best = []
for _ in range(5):
    t0 = time.perf_counter()
    for _ in range(2000):
        fn()
    best.append((time.perf_counter() - t0) / 2000 * 1e6)
print(f"python a call (launches stubbed): {min(best):.1f} us (rounds {' '.join(f'{x:.1f}' for x in best)})")
if "--profile" in sys.argv:
    import cProfile
    import pstats
    p = cProfile.Profile()
    p.enable()
    for _ in range(2000):
        fn()
    p.disable()
    pstats.Stats(p).sort_stats("tottime").print_stats(25)
