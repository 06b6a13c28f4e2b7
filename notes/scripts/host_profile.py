"""Lab profile (not for the package): where a zyfa FP8 call's host time goes. 300 fast-mode
calls at 1 x 1K (8 heads, d128: the GPU keeps up), under cProfile; the top functions by own
time, and the per-call wall time beside FA3 FP8's."""
import cProfile
import pstats
import time

import torch

import zyfa
from zyfa.activations import make

q, k, v = make("realistic", 1, 1024, 8, 8, 128, 128, seed=3, device="cuda")
x = zyfa.quantize_fp8(q, k, v)
kw = x.kwargs()
f = lambda: zyfa.flash_attn_func(**kw, causal=True, p_rule="exact", ref_rule="running", backend="ptx")  # noqa: E731
for _ in range(30):
    f()
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(300):
    f()
wall = (time.perf_counter() - t0) / 300 * 1e6
torch.cuda.synchronize()
prof = cProfile.Profile()
prof.enable()
for _ in range(300):
    f()
prof.disable()
torch.cuda.synchronize()
print(f"wall a call {wall:.1f} us (unprofiled)")
pstats.Stats(prof).sort_stats("tottime").print_stats(28)
