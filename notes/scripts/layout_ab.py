"""Lab A/B (not for the package), run 21 (its INT8 long layout: commit d04d2a5, reverted after it): which d128 layout each mode should take by length.
The INT8 Q.K^T kernel in the long (producer / two-consumer) layout against the serial one it
always took; the fast mode (ref_rule "running") and the exact default in the long layout below
LONG_KEYS against serial. Timed in turns (3 rounds, median of do_bench, fastest round) in one
process beside FA3 FP8; then the host time a call of each mode and FA3 in one loop."""
import json
import os
import time

import torch

import zyfa
from ab_common import fa3_call, first_out, tflops_in_turns      # notes/scripts, on the path as a script
from zyfa.activations import make
from zyfa.asm.ptx import layout

NEVER, ALWAYS = 1 << 30, 1


def with_long(keys, fn):
    def call():
        layout.LONG_KEYS = keys
        return fn()
    return call



def mode_call(x, mode):
    extra = dict(ref_rule="running") if mode == "fast" else {}
    return lambda: zyfa.flash_attn_func(**x.kwargs(), causal=True, p_rule="exact", backend="ptx", **extra)


# case: (B, S, Hq, Hkv, D, Dv), the modes whose layouts are compared
CASES = {"Mistral-7B 16K": ((1, 16384, 32, 8, 128, 128), ("int8",)),
         "d128 32 heads 32K": ((1, 32768, 32, 32, 128, 128), ("int8",)),
         "Mistral-7B 8K": ((1, 8192, 32, 8, 128, 128), ("int8", "fast")),
         "d128 batch 4 4K": ((4, 4096, 32, 32, 128, 128), ("int8", "fast", "exact")),
         "DeepSeek-V2-Lite 16K": ((1, 16384, 16, 16, 192, 128), ())}
rows = []
for name, ((B, S, Hq, Hkv, D, Dv), modes) in CASES.items():
    q, k, v = make("realistic", B, S, Hq, Hkv, D, Dv, seed=21, device="cuda")
    x8, xi = zyfa.quantize_fp8(q, k, v), zyfa.quantize_int8_qk(q, k, v)
    del q, k, v
    calls = {"fa3": fa3_call(x8)}
    equal = {}
    for mode in ("int8", "fast", "exact"):
        x = xi if mode == "int8" else x8
        base = mode_call(x, mode)
        if mode in modes:
            a, b = with_long(NEVER, base), with_long(ALWAYS, base)
            oa, ob = first_out(a()), first_out(b())
            equal[mode] = dict(bit_equal=torch.equal(oa, ob), max_abs=(oa.float() - ob.float()).abs().max().item())
            calls[f"{mode} serial"], calls[f"{mode} long"] = a, b
        else:
            calls[mode] = with_long(16384, base)
    layout.LONG_KEYS = 16384
    flops = 2 * B * Hq * (S * (S + 1) / 2) * (D + Dv)
    tf, times = tflops_in_turns(calls, flops)
    layout.LONG_KEYS = 16384
    rows.append(dict(case=name, equal=equal, tflops=tf, ms=times))
    print(f"{name:22s} " + " ".join(f"{k} {t:.0f}" for k, t in tf.items()) + " | /fa3 "
          + " ".join(f"{k} {t / tf['fa3']:.3f}" for k, t in tf.items() if k != "fa3") + f" | {equal}", flush=True)
    del x8, xi, calls
    torch.cuda.empty_cache()

# host time a call: a small shape, 100 calls back to back (the GPU keeps up), best of 5 turns
q, k, v = make("realistic", 1, 1024, 8, 8, 128, 128, seed=3, device="cuda")
x8, xi = zyfa.quantize_fp8(q, k, v), zyfa.quantize_int8_qk(q, k, v)
host_calls = {"fast": mode_call(x8, "fast"), "exact": mode_call(x8, "exact"), "int8": mode_call(xi, "int8"),
              "int8+quantize": lambda: zyfa.flash_attn_func(**zyfa.quantize_int8_qk(q, k, v).kwargs(), causal=True),
              "fp8+quantize": lambda: zyfa.flash_attn_func(**zyfa.quantize_fp8(q, k, v).kwargs(), causal=True),
              "fa3 fp8": fa3_call(x8)}
host = {n: [] for n in host_calls}
for f in host_calls.values():
    for _ in range(20):
        f()
torch.cuda.synchronize()
for _ in range(5):
    for n, f in host_calls.items():
        t0 = time.perf_counter()
        for _ in range(100):
            f()
        host[n].append((time.perf_counter() - t0) / 100 * 1e6)
        torch.cuda.synchronize()
host = {n: round(min(t), 1) for n, t in host.items()}
print("host us a call (1 x 1K, 8 heads, d128):", host)
with open(os.path.join(os.environ.get("OUT", "."), "layout_ab.json"), "w") as fh:
    json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, date=time.strftime("%Y-%m-%d %H:%M UTC",
                   time.gmtime()), rows=rows, host_us=host), fh, indent=1)
