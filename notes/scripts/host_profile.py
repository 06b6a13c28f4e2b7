"""Lab profile (not for the package): where a zyfa FP8 call's host time goes. 300 fast-mode
calls at 1 x 1K (8 heads, d128: the GPU keeps up), under cProfile; the top functions by own
time, and the per-call wall time. ``profile_calls`` serves the other host profiles."""
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
    import zyfa
    from zyfa.activations import make

    q, k, v = make("realistic", 1, 1024, 8, 8, 128, 128, seed=3, device="cuda")
    kw = zyfa.quantize_fp8(q, k, v).kwargs()
    profile_calls(lambda: zyfa.flash_attn_func(**kw, causal=True, p_rule="exact", ref_rule="running", backend="ptx"),
                  300, 28)
