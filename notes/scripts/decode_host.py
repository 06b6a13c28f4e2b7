"""Run 68 (written in session s, whose device lent no machine after run 66): where a zyfa E4M3 decode call's host time goes (run 66: gluon 235 us,
triton 274 us a call against FA3's 146 us at 8 x 32K, with GPU time ~0.2 ms each: host-paced).
8 x 1K keys so the GPU keeps up; cProfile's top functions by own time for each backend."""
import sys

import zyfa

sys.path.insert(0, "notes/scripts")
from ab_common import e4m3_decode_inputs, fa3_kvcache  # noqa: E402
from host_profile import profile_calls  # noqa: E402

fa3 = fa3_kvcache()

B, S = 8, 1024
q, k, v, ds, lens = e4m3_decode_inputs(B, S)
for b in ("gluon", "triton"):
    print(f"==== {b}")
    profile_calls(lambda b=b: zyfa.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens, **ds, backend=b), 300, 30)
print("==== fa3")
profile_calls(lambda: fa3(q, k, v, cache_seqlens=lens, **ds), 300, 6)
