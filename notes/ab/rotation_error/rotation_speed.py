"""quantize_int8_qk with and without the rotation on a GPU, ms (do_bench medians, L2 cleared), at the
frontier's 16K cases; the two calls' codes compared for shape only (they differ by design)."""
import torch
import triton

import zyfa
from zyfa.activations import make

for name, Hq, Hkv, D, Dv in [("Mistral-7B 16K", 32, 8, 128, 128), ("DeepSeek-V2-Lite 16K", 16, 16, 192, 128)]:
    q, k, v = make("realistic", 1, 16384, Hq, Hkv, D, Dv, seed=1, device="cuda")
    row = []
    for had in (True, False):
        ms = triton.testing.do_bench(lambda: zyfa.quantize_int8_qk(q, k, v, hadamard=had), warmup=25, rep=200,
                                     return_mode="median")
        row.append(f"hadamard={had} {ms:.3f} ms")
    copy = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    ms = triton.testing.do_bench(lambda: [c.copy_(x) for c, x in zip(copy, (q, k, v))], warmup=25, rep=200,
                                 return_mode="median")
    print(f"| {name} | {' | '.join(row)} | copy of q, k, v {ms:.3f} ms |", flush=True)
