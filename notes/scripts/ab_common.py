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
