"""Lab profile (not for the package): where a zyfa FP8 call's host time goes. 300 fast-mode
calls at 1 x 1K (8 heads, d128: the GPU keeps up), under cProfile; the top functions by own
time, and the per-call wall time. ``--int8``: quantize_int8_qk and the INT8 call instead, FA3
FP8's wall time beside them. ``profile_calls`` serves the other host profiles."""
import cProfile
import pstats
import time

import torch


def profile_calls(fn, calls: int, top: int, warmup: int = 30) -> float:
    """Wall time a call of ``fn`` (us, unprofiled, no sync between calls), then ``calls`` more
    under cProfile, the ``top`` functions by own time printed."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    wall = (time.perf_counter() - t0) / calls * 1e6
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    print(f"wall a call {wall:.1f} us (unprofiled)")
    pstats.Stats(prof).sort_stats("tottime").print_stats(top)
    return wall


if __name__ == "__main__":
    import sys

    import zyfa
    from zyfa.activations import make

    q, k, v = make("realistic", 1, 1024, 8, 8, 128, 128, seed=3, device="cuda")
    if "--int8" in sys.argv:
        # issue 55's host bar for the accurate mode: quantize_int8_qk and the INT8 call, each profiled,
        # beside FA3 FP8's wall time a call (the bar: FA3's + 50 us)
        x = zyfa.quantize_int8_qk(q, k, v)
        profile_calls(lambda: zyfa.quantize_int8_qk(q, k, v), 300, 24)
        profile_calls(lambda: zyfa.flash_attn_func(**x.kwargs(), causal=True, backend="ptx"), 300, 24)
        try:
            from fa3_fwd_interface import flash_attn_func as fa3
        except ImportError:
            from flash_attn_interface import flash_attn_func as fa3
        e = zyfa.quantize_fp8(q, k, v).kwargs()
        profile_calls(lambda: fa3(e["q"], e["k"], e["v"], causal=True, q_descale=e["q_descale"],
                                  k_descale=e["k_descale"], v_descale=e["v_descale"]), 300, 8)
    else:
        kw = zyfa.quantize_fp8(q, k, v).kwargs()
        profile_calls(lambda: zyfa.flash_attn_func(**kw, causal=True, p_rule="exact", ref_rule="running",
                                                   backend="ptx"), 300, 28)
