"""Lab profile (not for the package), for the next session: where the host time of the mixed
batch's calls goes (BF16 routed: 0.61 ms of host work for 0.64 ms of GPU work; FP8 from
64-token pages: 0.85 ms). Small heads so the GPU keeps up; cProfile's top functions by own
time for each call."""
import torch
from host_profile import profile_calls      # notes/scripts, on the path when run as a script

import zyfa
from zyfa import varlen
from zyfa.bench.cases import MIXED_KEYS, MIXED_QUERIES

HQ, HKV, D = 8, 2, 128
dev = "cuda"
cu = lambda ls: torch.tensor([0] + [sum(ls[:i + 1]) for i in range(len(ls))], dtype=torch.int32)  # noqa: E731
cq, ck = cu(MIXED_QUERIES), cu(MIXED_KEYS)
q = torch.randn(int(cq[-1]), HQ, D, device=dev).bfloat16()
k = torch.randn(int(ck[-1]), HKV, D, device=dev).bfloat16()
v = torch.randn(int(ck[-1]), HKV, D, device=dev).bfloat16()
d8 = {n: torch.full((len(MIXED_KEYS), HKV), 0.05, device=dev) for n in ("q_descale", "k_descale", "v_descale")}
q8, k8, v8 = ((x.float() / 0.05).to(torch.float8_e4m3fn) for x in (q, k, v))
kp, vp, table, used = varlen.paged_kv_cache(k8, v8, ck.to(dev), 64)
base = dict(cu_seqlens_q=cq, max_seqlen_q=max(MIXED_QUERIES), max_seqlen_k=max(MIXED_KEYS), causal=True)
table_h, used_h = table.cpu(), used.cpu()          # host index tensors, as zyfa's docs advise (not timed)
calls = {"bf16 routed": lambda: zyfa.flash_attn_varlen_func(q, k, v, cu_seqlens_k=ck, **base),
         "fp8 p64 one launch": lambda: zyfa.flash_attn_varlen_func(q8, kp, vp, block_table=table_h,
                                                                    seqused_k=used_h, ref_rule="running", **base,
                                                                    **d8)}
for name, fn in calls.items():
    print(f"== {name}")
    profile_calls(fn, 100, 18, warmup=10)
