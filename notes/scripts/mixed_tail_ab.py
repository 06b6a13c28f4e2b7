"""Lab A/B (not for the package), for run 45: where the routed BF16 mixed batch's 2.4% over
separate calls goes (run 43: 0.630 against 0.615 ms). The routed call's prefill launch lists
the two 4K chunks' tiles and the 16 decode sequences' one-key tiles, so its tile order takes
the unequal batch's tail (kernels.TAIL_PER_SM, 4 an SM re-sorted) where the two chunks alone
take the equal batch's (TAIL_PER_SM_EQUAL, 2). Timed: routed as is, routed with the tail at 2,
separate calls (decode kernel, then the two chunks), 5 rounds in turns, outputs compared."""
import torch
import triton

import zyfa
from ab_common import mixed_parts      # notes/scripts, on the path as a script
from zyfa.asm.ptx import kernels
from zyfa.bench.cases import MIXED_KEYS, MIXED_QUERIES

HQ, HKV, D = 32, 8, 128
dev = "cuda"
g = torch.Generator(device=dev).manual_seed(0)
cu = lambda ls: torch.tensor([0] + [sum(ls[:i + 1]) for i in range(len(ls))], dtype=torch.int32)  # noqa: E731
cq, ck = cu(MIXED_QUERIES), cu(MIXED_KEYS)
q, k, v = (torch.randn(int(c[-1]), h, D, generator=g, device=dev).bfloat16() for c, h in ((cq, HQ), (ck, HKV), (ck, HKV)))
base = dict(cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_q=max(MIXED_QUERIES), max_seqlen_k=max(MIXED_KEYS), causal=True)
dec, pre, (q_dec, k_dec, v_dec, lens), (q_pre, k_pre, v_pre, cpq, cpk) = mixed_parts(q, k, v, cq, ck, MIXED_QUERIES,
                                                                                    MIXED_KEYS, cu)
TAIL = kernels.TAIL_PER_SM


def routed(tail):
    def call():
        kernels.TAIL_PER_SM = tail
        try:
            return zyfa.flash_attn_varlen_func(q, k, v, **base)
        finally:
            kernels.TAIL_PER_SM = TAIL
    return call


def separate():
    zyfa.flash_attn_with_kvcache(q_dec, k_dec, v_dec, cache_seqlens=lens, causal=True)
    return zyfa.flash_attn_varlen_func(q_pre, k_pre, v_pre, cpq, cpk, max(MIXED_QUERIES), max(MIXED_KEYS), causal=True)


calls = {f"routed, tail {TAIL}": routed(TAIL), f"routed, tail {kernels.TAIL_PER_SM_EQUAL}": routed(kernels.TAIL_PER_SM_EQUAL),
         "separate calls": separate}
outs = {nm: fn() for nm, fn in calls.items()}
times = {nm: [] for nm in calls}
for _ in range(5):
    for nm, fn in calls.items():
        times[nm].append(triton.testing.do_bench(fn, warmup=5, rep=60, return_mode="median"))
names = list(calls)
print("routed outputs equal across tails:", torch.equal(outs[names[0]], outs[names[1]]))
for nm in names:
    print(f"{nm:20s} fastest {min(times[nm]):.4f} ms  median {sorted(times[nm])[2]:.4f} ms")
