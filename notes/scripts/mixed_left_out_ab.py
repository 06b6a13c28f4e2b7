"""Lab A/B (not for the package), for run 47: the routed BF16 mixed batch with its decode
sequences' tiles left out of the prefill launch's order (the package since session m:
Packed.written_elsewhere) against the same launch running them as one-key tiles (before; run
46 measured that at 0.642 ms median as CUDA graphs, 0.630 with the widened window, separate
calls 0.627) and against separate calls. Prediction: left out 0.615-0.625 ms as graphs (the
512 one-key tiles at ~3-5 us an SM-slot each, 132 SMs), at or under separate calls (same
launches, the routed call's decode writes through views). Timed in turns, 5 rounds, as calls
and as CUDA graphs; the profiler's device time a call; routed outputs compared bit for bit."""
import dataclasses

import torch
import triton

import zyfa
from ab_common import mixed_parts      # notes/scripts, on the path as a script
from zyfa.asm.ptx import kernels
from zyfa.bench.cases import MIXED_KEYS, MIXED_QUERIES
from zyfa.bench.measure import kernel_ms

HQ, HKV, D = 32, 8, 128
dev = "cuda"
g = torch.Generator(device=dev).manual_seed(0)
cu = lambda ls: torch.tensor([0] + [sum(ls[:i + 1]) for i in range(len(ls))], dtype=torch.int32)  # noqa: E731
cq, ck = cu(MIXED_QUERIES), cu(MIXED_KEYS)
q, k, v = (torch.randn(int(c[-1]), h, D, generator=g, device=dev).bfloat16() for c, h in ((cq, HQ), (ck, HKV), (ck, HKV)))
base = dict(cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_q=max(MIXED_QUERIES), max_seqlen_k=max(MIXED_KEYS), causal=True)
dec, pre, (q_dec, k_dec, v_dec, lens), (q_pre, k_pre, v_pre, cpq, cpk) = mixed_parts(q, k, v, cq, ck, MIXED_QUERIES,
                                                                                    MIXED_KEYS, cu)


ORIG_TILE_ORDER = kernels._tile_order


def tiles_run(layout, packed, *args, **kw):
    """kernels._tile_order as before session m: the written-elsewhere sequences' tiles listed."""
    if packed is not None:
        packed = dataclasses.replace(packed, written_elsewhere=())
    return ORIG_TILE_ORDER(layout, packed, *args, **kw)


def use(tile_order):
    kernels._tile_order = tile_order


def routed(tile_order):
    def call():
        use(tile_order)
        return zyfa.flash_attn_varlen_func(q, k, v, **base)
    return call


def separate():
    use(ORIG_TILE_ORDER)
    zyfa.flash_attn_with_kvcache(q_dec, k_dec, v_dec, cache_seqlens=lens, causal=True)
    return zyfa.flash_attn_varlen_func(q_pre, k_pre, v_pre, cpq, cpk, max(MIXED_QUERIES), max(MIXED_KEYS), causal=True)


calls = {"routed, left out": routed(ORIG_TILE_ORDER), "routed, tiles run": routed(tiles_run), "separate calls": separate}
outs = {nm: fn() for nm, fn in calls.items()}


def graphed(fn):
    """The call's launches replayed from a CUDA graph: the GPU's work alone, no host pacing (run
    45's do_bench rounds over the calls spread 50% on a fresh machine). None if not capturable."""
    try:
        fn()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        return g.replay
    except Exception as e:          # noqa: BLE001 - a lab script reports and goes on
        print(f"  not capturable: {type(e).__name__}: {str(e)[:120]}")
        return None


def device_ms(fn):
    """The call's kernels' and copies' device time (torch.profiler), summed."""
    return sum(kernel_ms(fn, calls=20).values())


kinds = {"calls": calls, "graphs": {nm: graphed(fn) for nm, fn in calls.items()}}
names = list(calls)
times = {(kind, nm): [] for kind in kinds for nm in names}
for _ in range(5):
    for kind, fns in kinds.items():
        for nm in names:
            if fns[nm] is not None:
                times[kind, nm].append(triton.testing.do_bench(fns[nm], warmup=5, rep=60, return_mode="median"))
first = {nm: o[0] if isinstance(o, tuple) else o for nm, o in outs.items()}
print("routed outputs equal, left out / run:", torch.equal(first[names[0]], first[names[1]]))
for (kind, nm), t in times.items():
    if t:
        print(f"{kind:6s} {nm:20s} fastest {min(t):.4f} ms  median {sorted(t)[len(t) // 2]:.4f} ms  rounds "
              + " ".join(f"{x:.3f}" for x in t))
for nm in names:
    print(f"device time {nm:20s} {device_ms(calls[nm]):.4f} ms (profiler, kernels and copies summed)")
kernels._tile_order = ORIG_TILE_ORDER
