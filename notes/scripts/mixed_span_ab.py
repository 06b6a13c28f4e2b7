"""Lab A/B (not for the package), run 28 (branch mixed-span): the BF16 mixed batch (16 one-query
decodes over 8K keys, then two 4K prefill chunks; GQA 32/8 d128, causal) routed three ways: the
prefill launch over every sequence (the old plan: each decode sequence a tile of one key), over
the span of prefill sequences only, and that with the decode launch on a side stream
(mixed.OVERLAP_DECODES); beside separate calls and FA3's varlen call, in turns, 5 rounds; GPU ms
(do_bench median) and host ms a call (20 calls without a sync); outputs compared bit for bit."""
import json
import os
import time

import torch
import triton

import zyfa
from ab_common import mixed_parts      # notes/scripts, on the path as a script
from zyfa import mixed, varlen
from zyfa.bench.cases import MIXED_KEYS, MIXED_QUERIES

HQ, HKV, D = 32, 8, 128
dev = "cuda"
g = torch.Generator(device=dev).manual_seed(0)
cu = lambda ls: torch.tensor([0] + [sum(ls[:i + 1]) for i in range(len(ls))], dtype=torch.int32)  # noqa: E731
cq, ck = cu(MIXED_QUERIES), cu(MIXED_KEYS)
q = torch.randn(int(cq[-1]), HQ, D, generator=g, device=dev).bfloat16()
k = torch.randn(int(ck[-1]), HKV, D, generator=g, device=dev).bfloat16()
v = torch.randn(int(ck[-1]), HKV, D, generator=g, device=dev).bfloat16()
mq, mk = max(MIXED_QUERIES), max(MIXED_KEYS)
REAL_PLAN = mixed.plan


def every_sequence(*a, **kw):
    p = REAL_PLAN(*a, **kw)
    return mixed.MixedPlan(p.decode, (0,) + p.prefill, p.why)          # span from sequence 0: the old launch


def routed(plan, overlap):
    def call():
        mixed.plan = varlen.plan = plan
        mixed.OVERLAP_DECODES = overlap
        try:
            return zyfa.flash_attn_varlen_func(q, k, v, cq, ck, mq, mk, causal=True)
        finally:
            mixed.plan = varlen.plan = REAL_PLAN
            mixed.OVERLAP_DECODES = False
    return call


dec, pre, (q_dec, k_dec, v_dec, lens), (q_pre, k_pre, v_pre, cpq, cpk) = mixed_parts(q, k, v, cq, ck, MIXED_QUERIES,
                                                                                    MIXED_KEYS, cu)
import fa3_fwd_interface as fa3  # noqa: E402
cqd, ckd = cq.to(dev), ck.to(dev)
calls = {
    "routed, launch over every sequence (old)": routed(every_sequence, False),
    "routed, prefill span": routed(REAL_PLAN, False),
    "routed, prefill span, decodes on a side stream": routed(REAL_PLAN, True),
    "separate calls": lambda: (zyfa.flash_attn_with_kvcache(q_dec, k_dec, v_dec, cache_seqlens=lens, causal=True),
                               zyfa.flash_attn_varlen_func(q_pre, k_pre, v_pre, cpq, cpk, mq, mk, causal=True)),
    "fa3 bf16 varlen": lambda: fa3.flash_attn_varlen_func(q, k, v, cqd, ckd, mq, mk, causal=True),
}
outs = {nm: fn() for nm, fn in calls.items() if nm.startswith("routed")}
old = outs["routed, launch over every sequence (old)"]
equal = {nm: bool(torch.equal(o, old)) for nm, o in outs.items()}
times = {nm: [] for nm in calls}
host = {nm: [] for nm in calls}
for r in range(5):
    for nm, fn in calls.items():
        fn()
        times[nm].append(triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="median"))
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(20):
            fn()
        host[nm].append((time.perf_counter() - t0) / 20 * 1e3)
        torch.cuda.synchronize()
best = {nm: min(t) for nm, t in times.items()}
sep = best["separate calls"]
for nm in calls:
    print(f"{nm:48s} {best[nm]:.4f} ms GPU ({sep / best[nm]:.3f}x separate)  host {min(host[nm]):.3f} ms"
          + (f"  bit-equal to old {equal[nm]}" if nm in equal else ""), flush=True)
with open(os.path.join(os.environ.get("OUT", "."), "mixed_span_ab.json"), "w") as fh:
    json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                   date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), ms=times, host_ms=host,
                   bit_equal=equal), fh, indent=1)
