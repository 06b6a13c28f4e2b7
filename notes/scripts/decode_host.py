"""Run 68 (written in session s, whose device lent no machine after run 66): where a zyfa E4M3 decode call's host time goes (run 66: gluon 235 us,
triton 274 us a call against FA3's 146 us at 8 x 32K, with GPU time ~0.2 ms each: host-paced).
8 x 1K keys so the GPU keeps up; cProfile's top functions by own time for each backend."""
import sys

import torch

import zyfa
sys.path.insert(0, "notes/scripts")
from host_profile import profile_calls  # noqa: E402

try:
    from fa3_fwd_interface import flash_attn_with_kvcache as fa3
except ImportError:
    from flash_attn_interface import flash_attn_with_kvcache as fa3

B, S = 8, 1024
q = torch.randn(B, 1, 32, 128, device="cuda").to(torch.float8_e4m3fn)
k = torch.randn(B, S, 8, 128, device="cuda").to(torch.float8_e4m3fn)
v = torch.randn(B, S, 8, 128, device="cuda").to(torch.float8_e4m3fn)
ds = {n: torch.full((B, 8), 0.02, device="cuda") for n in ("q_descale", "k_descale", "v_descale")}
lens = torch.full((B,), S, dtype=torch.int32, device="cuda")
for b in ("gluon", "triton"):
    print(f"==== {b}")
    profile_calls(lambda b=b: zyfa.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens, **ds, backend=b), 300, 30)
print("==== fa3")
profile_calls(lambda: fa3(q, k, v, cache_seqlens=lens, **ds), 300, 6)
