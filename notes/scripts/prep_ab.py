"""Lab A/B (not for the package): the dense FP8 call's preparation in one launch
(zyfa.hopper_vt.hopper_inputs: V^T in the key order, the score factors, the V descales; new)
against hopper_vt + head_factor + per_channel_v_descale (four launches; old), timed in turns
in one process beside FA3 FP8; then host time a call (small shape, launches only) of both
and of FA3. Outputs must be bit-equal."""
import json
import os
import time

import torch
import triton.testing

import zyfa
from zyfa.activations import make
from zyfa.asm.ptx import kernels
from zyfa.hopper_vt import hopper_vt
from zyfa.spec.descales import head_factor, per_channel_v_descale

NEW = kernels.hopper_inputs


def OLD(v, qd, kd, vd, scale):
    B, _, Hkv, Dv = v.shape
    return hopper_vt(v), head_factor(qd, kd, B, Hkv, scale, v.device), per_channel_v_descale(vd, B, Hkv, Dv)


def use(fn):
    kernels.hopper_inputs = fn


def call(x, running):
    extra = dict(ref_rule="running") if running else {}
    return lambda: zyfa.flash_attn_func(**x.kwargs(), causal=True, p_rule="exact", backend="ptx", **extra)


def fa3_call(x):
    import fa3_fwd_interface
    v = x.v.contiguous()
    return lambda: fa3_fwd_interface.flash_attn_func(x.q, x.k, v, causal=True, q_descale=x.q_descale,
                                                     k_descale=x.k_descale, v_descale=x.v_descale)


_out = lambda r: r[0] if isinstance(r, tuple) else r  # noqa: E731
bench = lambda fn: triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")  # noqa: E731
CASES = {"Mistral-7B 16K": (1, 16384, 32, 8, 128, 128), "DeepSeek-V2-Lite 16K": (1, 16384, 16, 16, 192, 128),
         "d128 32 heads 32K": (1, 32768, 32, 32, 128, 128), "d128 batch 4 4K": (4, 4096, 32, 32, 128, 128),
         "d64 batch 4 8K": (4, 8192, 32, 32, 64, 64), "d256 batch 4 8K": (4, 8192, 8, 8, 256, 256)}
rows = []
for name, (B, S, Hq, Hkv, D, Dv) in CASES.items():
    q, k, v = make("realistic", B, S, Hq, Hkv, D, Dv, seed=11, device="cuda")
    x = zyfa.quantize_fp8(q, k, v)
    del q, k, v
    outs = {}
    for tag, fn in (("old", OLD), ("new", NEW)):
        use(fn)
        outs[tag] = [_out(call(x, r)()) for r in (False, True)]
    same = all(torch.equal(a, b) for a, b in zip(outs["old"], outs["new"]))
    flops = 2 * B * Hq * (S * (S + 1) / 2) * (D + Dv)
    fa3 = fa3_call(x)
    keys = ("old exact", "new exact", "old fast", "new fast", "fa3")
    times = {k: [] for k in keys}
    for _ in range(3):
        for tag, fn in (("old", OLD), ("new", NEW)):
            use(fn)
            for mode, running in (("exact", False), ("fast", True)):
                f = call(x, running)
                f()
                times[f"{tag} {mode}"].append(bench(f))
        times["fa3"].append(bench(fa3))
    tf = {k: flops / min(t) / 1e9 for k, t in times.items()}
    rows.append(dict(case=name, bit_equal=same, tflops=tf, ms=times))
    print(f"{name:22s} equal {same} " + " ".join(f"{k} {t:.0f}" for k, t in tf.items())
          + f" | new/old exact {tf['new exact'] / tf['old exact']:.3f} fast {tf['new fast'] / tf['old fast']:.3f}"
          + f" | /fa3 exact {tf['new exact'] / tf['fa3']:.3f} fast {tf['new fast'] / tf['fa3']:.3f}", flush=True)
    del x, outs
    torch.cuda.empty_cache()

# host time a call: a small shape, 300 calls back to back, the CPU's time a call (the GPU keeps up)
q, k, v = make("realistic", 1, 1024, 8, 8, 128, 128, seed=3, device="cuda")
x = zyfa.quantize_fp8(q, k, v)
host = {}
for tag, f in (("old", None), ("new", None), ("fa3", fa3_call(x))):
    if f is None:
        use(OLD if tag == "old" else NEW)
        f = call(x, True)
    for _ in range(20):
        f()
    torch.cuda.synchronize()
    best = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(100):
            f()
        best.append((time.perf_counter() - t0) / 100 * 1e6)
        torch.cuda.synchronize()
    host[tag] = min(best)
print("host us a call (fast mode, 1 x 1K, 8 heads):", {k: round(t, 1) for k, t in host.items()})
with open(os.path.join(os.environ.get("OUT", "."), "prep_ab.json"), "w") as fh:
    json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows, host_us=host), fh, indent=1)
for tag in ("exact", "fast"):
    gain = sum(r["tflops"][f"new {tag}"] / r["tflops"][f"old {tag}"] for r in rows) / len(rows)
    print(f"new / old {tag}, mean over the cases: {gain:.4f}")
