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
