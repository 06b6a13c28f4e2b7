"""What the lab's A/B scripts share (not for the package): FA3 FP8's call on the same quantized
inputs, the first output of a call, and timing calls in turns."""
import triton.testing


def fa3_call(x):
    """FA3 FP8 (fa3-fwd) on zyfa.quantize_fp8's inputs ``x``, causal."""
    import fa3_fwd_interface
    v = x.v.contiguous()
    return lambda: fa3_fwd_interface.flash_attn_func(x.q, x.k, v, causal=True, q_descale=x.q_descale,
                                                     k_descale=x.k_descale, v_descale=x.v_descale)


def first_out(result):
    """The output of a call that may also return its LSE."""
    return result[0] if isinstance(result, tuple) else result


def tflops_in_turns(calls: dict, flops: float, rounds: int = 3) -> tuple[dict, dict]:
    """Each call timed once a round in turns (do_bench's median), ``rounds`` rounds; returns
    (TFLOP/s of each call's fastest round, every round's ms)."""
    times = {k: [] for k in calls}
    for _ in range(rounds):
        for key, fn in calls.items():
            fn()
            times[key].append(triton.testing.do_bench(fn, warmup=30, rep=250, return_mode="median"))
    return {k: flops / min(t) / 1e9 for k, t in times.items()}, times


def ptx_variant(use, variant, x, built: dict, **call_kw):
    """A call of zyfa.flash_attn_func on quantized inputs ``x`` (backend ptx, ``call_kw``) whose
    generated kernel is built with the lab switches ``use(variant)`` sets (kept in ``built``)."""
    import torch

    import zyfa
    from zyfa.asm.ptx import attention as attn, kernels
    from zyfa.asm.ptx.assemble import assemble
    from zyfa.asm.ptx.loader import Kernel
    orig = kernels._attention

    def build(rule, causal, dqk, arch, device, packed, long, ref_rule, window=False, slot_keys=False):
        key = (variant, rule, causal, dqk, packed, long, ref_rule, window, slot_keys)
        if key not in built:
            name, ptx = attn.attention_kernel(rule, causal, dqk, arch, packed, long=long, ref_rule=ref_rule,
                                              window=window, slot_keys=slot_keys)
            lay = attn.layout_for(dqk, dv=attn.fp8_dv(dqk), packed=packed, long=long,
                                  wide=attn.wide_blocks(rule, ref_rule, window))
            built[key] = Kernel(assemble(ptx, arch).cubin, name, torch.device("cuda", device), lay.shared_bytes)
        return built[key]

    def call():
        use(variant)
        kernels._attention = build
        try:
            return zyfa.flash_attn_func(**x.kwargs(), backend="ptx", **call_kw)
        finally:
            kernels._attention = orig
    return call


def mixed_parts(q, k, v, cq, ck, q_lens, k_lens, cu):
    """The mixed batch's two parts as separate calls take them: the one-query decodes as a dense
    cache (q_dec, k_dec, v_dec, their key counts on q's device) and the prefill sequences packed
    (q_pre, k_pre, v_pre, their cu_seqlens_q / _k by ``cu``), with each part's sequence numbers."""
    import torch
    dec = [i for i, n in enumerate(q_lens) if n == 1]
    pre = [i for i, n in enumerate(q_lens) if n > 1]
    q_dec = torch.stack([q[cq[i]:cq[i] + 1] for i in dec])
    k_dec, v_dec = (torch.stack([x[ck[i]:ck[i] + k_lens[i]] for i in dec]) for x in (k, v))
    lens = torch.tensor([k_lens[i] for i in dec], dtype=torch.int32, device=q.device)
    q_pre = torch.cat([q[cq[i]:cq[i + 1]] for i in pre])
    k_pre, v_pre = (torch.cat([x[ck[i]:ck[i + 1]] for i in pre]) for x in (k, v))
    cpq, cpk = cu([q_lens[i] for i in pre]), cu([k_lens[i] for i in pre])
    return dec, pre, (q_dec, k_dec, v_dec, lens), (q_pre, k_pre, v_pre, cpq, cpk)


def calls_and_graphs_in_turns(calls: dict, rounds: int = 5) -> None:
    """Each call timed as a call and replayed from a CUDA graph (the GPU's work alone, no host
    pacing: run 45's rounds over calls spread 50% on a fresh machine), in turns, do_bench
    medians a round; printed with the fastest and median round, then each call's kernels' and
    copies' device time (torch.profiler, summed)."""
    import torch
    from zyfa.bench.measure import kernel_ms

    def graphed(fn):
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

    kinds = {"calls": calls, "graphs": {nm: graphed(fn) for nm, fn in calls.items()}}
    times = {(kind, nm): [] for kind in kinds for nm in calls}
    for _ in range(rounds):
        for kind, fns in kinds.items():
            for nm, fn in fns.items():
                if fn is not None:
                    times[kind, nm].append(triton.testing.do_bench(fn, warmup=5, rep=60, return_mode="median"))
    for (kind, nm), t in times.items():
        if t:
            print(f"{kind:6s} {nm:20s} fastest {min(t):.4f} ms  median {sorted(t)[len(t) // 2]:.4f} ms  rounds "
                  + " ".join(f"{x:.3f}" for x in t))
    for nm, fn in calls.items():
        print(f"device time {nm:20s} {sum(kernel_ms(fn, calls=20).values()):.4f} ms (profiler, kernels and copies summed)")


def bf16_mixed_batch(heads=32, kv_heads=8, d=128):
    """The bench's mixed batch (16 one-query decodes of 8K keys, two 4K prefill chunks) in BF16
    on the GPU, fixed seed: (q, k, v, the varlen call's keywords, separate calls' parts as
    mixed_parts gives them)."""
    import torch
    from zyfa.bench.cases import MIXED_KEYS, MIXED_QUERIES
    g = torch.Generator(device="cuda").manual_seed(0)
    cu = lambda ls: torch.tensor([0] + [sum(ls[:i + 1]) for i in range(len(ls))], dtype=torch.int32)  # noqa: E731
    cq, ck = cu(MIXED_QUERIES), cu(MIXED_KEYS)
    q, k, v = (torch.randn(int(c[-1]), h, d, generator=g, device="cuda").bfloat16()
               for c, h in ((cq, heads), (ck, kv_heads), (ck, kv_heads)))
    base = dict(cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_q=max(MIXED_QUERIES), max_seqlen_k=max(MIXED_KEYS),
                causal=True)
    return q, k, v, base, mixed_parts(q, k, v, cq, ck, MIXED_QUERIES, MIXED_KEYS, cu)


def ms_rounds_in_turns(runs: dict, rounds: int = 5) -> dict:
    """Each call's do_bench median (L2 cleared), once a round in turns: {name: [ms a round]}."""
    times = {name: [] for name in runs}
    for _ in range(rounds):
        for name, fn in runs.items():
            times[name].append(triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="median"))
    return times


def fastest_and_median(t: list) -> str:
    return f"fastest {min(t):.3f} ms  median {sorted(t)[len(t) // 2]:.3f} ms"


def e4m3_decode_inputs(B: int, S: int):
    """A decode step's inputs on the GPU: E4M3 q (B, 1, 32, 128) and an E4M3 cache (B, S, 8, 128)
    from randn, descales 0.02 per (sequence, kv head), every sequence S keys: (q, k, v, descales,
    cache_seqlens)."""
    import torch
    q = torch.randn(B, 1, 32, 128, device="cuda").to(torch.float8_e4m3fn)
    k = torch.randn(B, S, 8, 128, device="cuda").to(torch.float8_e4m3fn)
    v = torch.randn(B, S, 8, 128, device="cuda").to(torch.float8_e4m3fn)
    ds = {n: torch.full((B, 8), 0.02, device="cuda") for n in ("q_descale", "k_descale", "v_descale")}
    return q, k, v, ds, torch.full((B,), S, dtype=torch.int32, device="cuda")


def fa3_kvcache():
    """FlashAttention-3's flash_attn_with_kvcache (fa3-fwd's, else flash_attn_interface's)."""
    try:
        from fa3_fwd_interface import flash_attn_with_kvcache
    except ImportError:
        from flash_attn_interface import flash_attn_with_kvcache
    return flash_attn_with_kvcache
