"""Lab A/B (not for the package): the fast mode's exact-rule row sums as each thread's FADDs of
the unrounded exponentials (lean_p.thread_row_sums, new: FlashAttention's sums, the spec's
running rule) against the rounded P's sums by half-precision wgmma (old), timed in turns in one
process beside the default exact kernel and FA3 FP8. The outputs differ by the row sums (not
bit-equal): their largest difference is printed; the GPU tests hold the new kernels to the spec."""
import json
import os

import torch
import triton.testing

import zyfa
from zyfa.activations import make
from zyfa.asm.ptx import block, kernels, loads

NEW = block.thread_row_sums
OLD = lambda rule, running: False  # noqa: E731


def use(fn) -> None:
    block.thread_row_sums = loads.thread_row_sums = fn
    kernels._attention.cache_clear()


def fast(x):
    return lambda: zyfa.flash_attn_func(**x.kwargs(), causal=True, p_rule="exact", ref_rule="running", backend="ptx")


def fa3_call(x):
    import fa3_fwd_interface
    v = x.v.contiguous()
    return lambda: fa3_fwd_interface.flash_attn_func(x.q, x.k, v, causal=True, q_descale=x.q_descale,
                                                     k_descale=x.k_descale, v_descale=x.v_descale)


def rel_err(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


bench = lambda fn: triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")  # noqa: E731
rows = []
CASES = {"Mistral-7B 16K": (1, 16384, 32, 8, 128, 128), "DeepSeek-V2-Lite 16K": (1, 16384, 16, 16, 192, 128),
         "d128 32 heads 32K": (1, 32768, 32, 32, 128, 128), "d128 batch 4 4K": (4, 4096, 32, 32, 128, 128),
         "d64 batch 4 8K": (4, 8192, 32, 32, 64, 64), "d256 batch 4 8K": (4, 8192, 8, 8, 256, 256)}
for name, (B, S, Hq, Hkv, D, Dv) in CASES.items():
    q, k, v = make("realistic", B, S, Hq, Hkv, D, Dv, seed=11, device="cuda")
    x = zyfa.quantize_fp8(q, k, v)
    del q, k, v
    errs = {}
    for tag, fn in (("old", OLD), ("new", NEW)):
        use(fn)
        out = fast(x)()
        torch.cuda.synchronize()
        errs[tag] = out
    same = torch.equal(errs["old"], errs["new"])
    diff = (errs["old"].float() - errs["new"].float()).abs().max().item()
    flops = 2 * B * Hq * (S * (S + 1) / 2) * (D + Dv)
    fa3 = fa3_call(x)
    exact = lambda: zyfa.flash_attn_func(**x.kwargs(), causal=True, p_rule="exact", backend="ptx")  # noqa: E731
    times = {k: [] for k in ("old", "new", "exact", "fa3")}
    for _ in range(3):
        for tag, fn in (("old", OLD), ("new", NEW)):
            use(fn)
            f = fast(x)
            f()
            times[tag].append(bench(f))
        times["exact"].append(bench(exact))
        times["fa3"].append(bench(fa3))
    tf = {k: flops / min(t) / 1e9 for k, t in times.items()}
    rows.append(dict(case=name, bit_equal=same, max_abs_diff=diff, tflops=tf, ms=times))
    print(f"{name:22s} equal {same} maxdiff {diff:.2e}  " + "  ".join(f"{k} {t:.0f}" for k, t in tf.items())
          + f"  new/old {tf['new'] / tf['old']:.3f} new/fa3 {tf['new'] / tf['fa3']:.3f} old/fa3 {tf['old'] / tf['fa3']:.3f}"
          + f" exact/fa3 {tf['exact'] / tf['fa3']:.3f}", flush=True)
    del x, errs
    torch.cuda.empty_cache()
with open(os.path.join(os.environ.get("OUT", "."), "sums_ab.json"), "w") as f:
    json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), f, indent=1)
gain = sum(r["tflops"]["new"] / r["tflops"]["old"] for r in rows) / len(rows)
print(f"new / old, mean over the cases: {gain:.4f}")
