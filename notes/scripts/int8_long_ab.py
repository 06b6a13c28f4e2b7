"""Lab A/B (not for the package), for the session after n: the INT8 Q.K^T kernel at d128 in the
long layout (producer / two consumers, four stages: E4M3 d128's from 16K keys) against the serial
layout it keeps, now that its softmax takes the row max on the integers (int8_qk.int_row_max).
On 2026-12-06, before the integer max, the long layout measured -3.0% at Mistral-7B 16K and
-1.4% at d128 32 heads 32K (docs/decisions.md: its extra integer-to-float work was hidden
better by three serial CTAs an SM). ptxas (CPU, session n): the long INT8 kernel 168 registers,
no spills, 149,584 bytes of shared memory, 384 threads. Timed in turns in one process beside
FA3 FP8 (5 rounds, do_bench medians); outputs compared bit for bit (the same block references;
only the schedule differs). Prediction: long / serial -2% to +3% at Mistral-7B 16K and Qwen3-8B
16K, -1% to +3% at 32K; the INT8 bar (0.9x FA3 FP8 at Mistral, 0.849 median in run 53) stays short.

With notes/ab/int8_conversion/session_n/grid_variants.diff applied (lab switches in int8_qk.py,
read when a kernel is generated), "grid" variants join: c's two low significand bits cleared, the
block max rounded up onto M c's grid, the magic constant folded into the FFMA's addend (one
integer add a score instead of the pair). Not bit-equal to today's spec (a changed INT8 rule:
notes/fast_mode.md, "Session n: the INT8 grid fold"), so their outputs are compared by their
largest difference only. Prediction (static SASS, a helper): grid / serial +2-5%, grid + long
0-5% over grid serial.

    PYTHONPATH=.:notes/scripts python notes/scripts/int8_long_ab.py
"""
import json
import os
import time

import torch

import zyfa
from ab_common import fa3_call, first_out, tflops_in_turns      # notes/scripts
from zyfa.activations import make
from zyfa.asm.ptx import attention as attn, int8_qk, kernels, layout as lay
from zyfa.asm.ptx.assemble import assemble
from zyfa.asm.ptx.loader import Kernel

PACKAGE_LAYOUT = lay.layout_for.__wrapped__
LONG = {"on": False}
GRID = {"on": False}
HAS_GRID = hasattr(int8_qk, "GRID")                 # grid_variants.diff applied


def lab_layout_for(dqk, dtype="e4m3", dv=None, packed=False, int8_qk=False, long=False, wide=False):
    """The package's layout_for, but the INT8 kernel at d128 takes the long layout while LONG is on."""
    import dataclasses
    if int8_qk and LONG["on"] and dqk == 128:
        return dataclasses.replace(PACKAGE_LAYOUT(dqk, dv=dv, long=True), int8_qk=True)
    return PACKAGE_LAYOUT(dqk, dtype, dv, packed, int8_qk, long, wide)


built = {}


def lab_kernel(rule, causal, dqk, arch, device, window=False):
    key = (LONG["on"], GRID["on"], rule, causal, dqk, window)
    if key not in built:
        if HAS_GRID:
            int8_qk.GRID = int8_qk.ROUND_UP = GRID["on"]
        name, ptx = attn.attention_kernel(rule, causal, dqk, arch, int8_qk=True, window=window)
        built[key] = Kernel(assemble(ptx, arch).cubin, name, torch.device("cuda", device),
                            attn.layout_for(dqk, dv=attn.fp8_dv(dqk), int8_qk=True).shared_bytes)
    return built[key]


for mod in (lay, attn, kernels):                 # every module that took layout_for by name
    if getattr(mod, "layout_for", None) is not None:
        mod.layout_for = lab_layout_for
kernels._attention_int8qk = lab_kernel


def call(x, long, grid=False):
    def fn():
        LONG["on"], GRID["on"] = long, grid
        try:
            return zyfa.flash_attn_func(**x.kwargs(), causal=True, backend="ptx")
        finally:
            LONG["on"] = GRID["on"] = False
    return fn


CASES = {"Mistral-7B 16K": (1, 16384, 32, 8), "Qwen3-8B 16K": (1, 16384, 32, 8), "d128 32 heads 32K": (1, 32768, 32, 32)}
if os.environ.get("INT8_CASES"):                    # a short call: the named cases only (comma-separated)
    CASES = {k: v for k, v in CASES.items() if k in os.environ["INT8_CASES"].split(",")}
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
rows = []
for name, (B, S, Hq, Hkv) in CASES.items():
    q, k, v = make("realistic", B, S, Hq, Hkv, 128, 128, seed=11 if name.startswith("Qwen") else 7, device="cuda")
    xi, xe = zyfa.quantize_int8_qk(q, k, v), zyfa.quantize_fp8(q, k, v)
    del q, k, v
    calls = {"fa3": fa3_call(xe), "serial": call(xi, False), "long": call(xi, True)}
    if HAS_GRID:
        calls.update({"grid": call(xi, False, True), "grid long": call(xi, True, True)})
    outs = {kk: first_out(fn()).float() for kk, fn in calls.items() if kk != "fa3"}
    equal = torch.equal(outs["serial"], outs["long"])
    diff = {kk: (o - outs["serial"]).abs().max().item() for kk, o in outs.items()}
    del outs
    tf, times = tflops_in_turns(calls, 2 * B * Hq * (S * (S + 1) / 2) * 256, rounds=5)
    med = {kk: sorted(t)[len(t) // 2] for kk, t in times.items()}
    rows.append(dict(case=name, bit_equal=equal, max_diff=diff, tflops=tf, ms=times))
    print(f"{name:20s} long bit-equal to serial {equal}; fa3 {tf['fa3']:.0f} TFLOP/s; " + "; ".join(
        f"{kk} {tf[kk]:.0f} (/serial {tf[kk] / tf['serial']:.3f} / {med['serial'] / med[kk]:.3f}, x fa3 "
        f"{tf[kk] / tf['fa3']:.3f} / {med['fa3'] / med[kk]:.3f}, diff {diff[kk]:.1e})"
        for kk in calls if kk not in ("fa3", "serial")), flush=True)
    del xi, xe, calls
    torch.cuda.empty_cache()
with open(os.path.join(os.environ.get("OUT", "."), "int8_long_ab.json"), "w") as fh:
    json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__,
                   date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), rows=rows), fh, indent=1)
