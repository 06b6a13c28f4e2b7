"""Lab A/B (not for the package), run 18: the mixed batch (16 one-query decodes over 8K keys and
two 4K prefill chunks, GQA 32/8 d128, causal) in one process beside FA3's varlen call.
FP8 under the fast mode's rules (ref_rule running) from paged caches: routed (decodes on the
decode kernel reading the pages in place; the prefill launch gathers the chunks' pages only)
against not routed (the old plan: every page gathered, one prefill launch), and the contiguous
call. BF16 contiguous: the routed call against separate calls, and the parts of each, to find
where the routed call loses."""
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
ms = lambda fn: triton.testing.do_bench(fn, warmup=5, rep=60, return_mode="median")  # noqa: E731
dev = "cuda"
g = torch.Generator(device=dev).manual_seed(0)
n = len(MIXED_KEYS)
cu = lambda ls: torch.tensor([0] + [sum(ls[:i + 1]) for i in range(len(ls))], dtype=torch.int32)  # noqa: E731
cq, ck = cu(MIXED_QUERIES), cu(MIXED_KEYS)
q = torch.randn(int(cq[-1]), HQ, D, generator=g, device=dev).bfloat16()
k = torch.randn(int(ck[-1]), HKV, D, generator=g, device=dev).bfloat16()
v = torch.randn(int(ck[-1]), HKV, D, generator=g, device=dev).bfloat16()
d8 = {nm: torch.full((n, HKV), 0.05, device=dev) for nm in ("q_descale", "k_descale", "v_descale")}
q8, k8, v8 = ((x.float() / 0.05).to(torch.float8_e4m3fn) for x in (q, k, v))
mq, mk = max(MIXED_QUERIES), max(MIXED_KEYS)
base = dict(cu_seqlens_q=cq, max_seqlen_q=mq, max_seqlen_k=mk, causal=True)


def not_routed(*a, **kw):
    return mixed.MixedPlan((), tuple(i for i, ql in enumerate(MIXED_QUERIES) if ql), "forced: not routed")


REAL_PLAN = mixed.plan
calls = {}
for page in (16, 64):
    kp, vp, table, used = varlen.paged_kv_cache(k8, v8, ck.to(dev), page)
    vp = vp.contiguous()                # key-major V pages: what the decode kernel reads (routable)
    a = dict(base, block_table=table.cpu(), seqused_k=used.cpu(), ref_rule="running", **d8)
    calls[f"fp8 running p{page} routed"] = (lambda a=a, kp=kp, vp=vp: zyfa.flash_attn_varlen_func(q8, kp, vp, **a), False)
    calls[f"fp8 running p{page} not routed"] = (lambda a=a, kp=kp, vp=vp: zyfa.flash_attn_varlen_func(q8, kp, vp, **a), True)
calls["fp8 running contiguous"] = (lambda: zyfa.flash_attn_varlen_func(q8, k8, v8, cu_seqlens_k=ck, ref_rule="running",
                                                                        **base, **d8), False)
calls["fp8 default contiguous"] = (lambda: zyfa.flash_attn_varlen_func(q8, k8, v8, cu_seqlens_k=ck, **base, **d8), False)
import fa3_fwd_interface as fa3  # noqa: E402
cqd, ckd = cq.to(dev), ck.to(dev)
calls["fa3 fp8 varlen"] = (lambda: fa3.flash_attn_varlen_func(q8, k8, v8, cqd, ckd, mq, mk, causal=True, **d8), False)
calls["fa3 bf16 varlen"] = (lambda: fa3.flash_attn_varlen_func(q, k, v, cqd, ckd, mq, mk, causal=True), False)
# BF16: routed vs separate, and the parts
calls["bf16 routed"] = (lambda: zyfa.flash_attn_varlen_func(q, k, v, cu_seqlens_k=ck, **base), False)
calls["bf16 not routed"] = (lambda: zyfa.flash_attn_varlen_func(q, k, v, cu_seqlens_k=ck, **base), True)
dec, pre, (q_dec, k_dec, v_dec, lens), (q_pre, k_pre, v_pre, cpq, cpk) = mixed_parts(q, k, v, cq, ck, MIXED_QUERIES,
                                                                                    MIXED_KEYS, cu)
calls["bf16 part: decode (dense cache)"] = (lambda: zyfa.flash_attn_with_kvcache(q_dec, k_dec, v_dec, cache_seqlens=lens,
                                                                                causal=True), False)
starts = torch.tensor([int(ck[i]) for i in dec], dtype=torch.int32, device=dev)
calls["bf16 part: decode (packed keys, leftpad)"] = (lambda: zyfa.flash_attn_with_kvcache(
    q_dec, k[None].expand(len(dec), *k.shape), v[None].expand(len(dec), *v.shape), cache_seqlens=starts + lens,
    cache_leftpad=starts, causal=True), False)
calls["bf16 part: prefill (2 chunks)"] = (lambda: zyfa.flash_attn_varlen_func(q_pre, k_pre, v_pre, cpq, cpk, mq, mk,
                                                                              causal=True), False)
pre_k = [min(kl, ql) if ql == 1 else kl for ql, kl in zip(MIXED_QUERIES, MIXED_KEYS)]
k_one = torch.cat([k[ck[i]:ck[i] + pre_k[i]] for i in range(n)])
v_one = torch.cat([v[ck[i]:ck[i] + pre_k[i]] for i in range(n)])
calls["bf16 part: prefill launch of the routed call"] = (lambda: zyfa.flash_attn_varlen_func(
    q, k_one, v_one, cq, cu(pre_k), mq, mk, causal=True), False)
calls["bf16 separate"] = (lambda: (calls["bf16 part: decode (dense cache)"][0](), calls["bf16 part: prefill (2 chunks)"][0]()),
                          False)

for nm in list(calls):                  # a call that fails is reported and dropped, not fatal
    mixed.plan = varlen.plan = not_routed if calls[nm][1] else REAL_PLAN
    try:
        calls[nm][0]()
    except Exception as e:  # noqa: BLE001
        print(f"{nm}: {type(e).__name__}: {str(e)[:300]}", flush=True)
        del calls[nm]
times = {nm: [] for nm in calls}
host = {}
outs = {}
for r in range(3):
    for nm, (fn, force) in calls.items():
        mixed.plan = not_routed if force else REAL_PLAN
        varlen.plan = mixed.plan
        o = fn()
        outs[nm] = o[0] if isinstance(o, tuple) else o
        times[nm].append(ms(fn))
        if r == 2:                  # host time a call: 20 calls back to back, no sync between
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(20):
                fn()
            host[nm] = (time.perf_counter() - t0) / 20 * 1e3
            torch.cuda.synchronize()
mixed.plan = varlen.plan = REAL_PLAN
flops = sum(4 * HQ * D * (ql * kl - ql * (ql - 1) / 2) for ql, kl in zip(MIXED_QUERIES, MIXED_KEYS))
best = {nm: min(t) for nm, t in times.items()}
for nm in calls:
    print(f"{nm:45s} {best[nm]:.4f} ms  {flops / best[nm] / 1e9:6.0f} TFLOP/s(call)  host {host[nm]:.3f} ms", flush=True)
if all(f"fp8 running p{p} routed" in outs for p in (16, 64)):
    print("fp8 routed p16 == p64 bitwise:", bool(torch.equal(outs["fp8 running p64 routed"], outs["fp8 running p16 routed"])))
if "fp8 running p64 not routed" in outs and "fp8 running p64 routed" in outs:
    print("fp8 routed vs not routed max|diff|:",
          (outs["fp8 running p64 routed"].float() - outs["fp8 running p64 not routed"].float()).abs().max().item())
with open(os.path.join(os.environ.get("OUT", "."), "mixed_ab.json"), "w") as fh:
    json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                   ms=best, host_ms=host, tflops={nm: flops / t / 1e9 for nm, t in best.items()}), fh, indent=1)
