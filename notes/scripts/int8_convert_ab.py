"""Lab A/B (not for the package): the INT8 Q.K^T kernel's int32 -> float conversion, the
magic-number pair (VIADD + FADD, the default) against one cvt.rn.f32.s32 (I2FP.F32.S32 on
sm_90a), timed in turns in one process beside the E4M3 exact kernel and FA3 FP8; outputs
compared bit for bit (both conversions are exact)."""
import json
import os
import sys

import torch
import triton.testing

import zyfa
from zyfa.activations import make
from zyfa.asm.ptx import int8_qk, kernels, target


def cvt_scores(prog, s):
    for si in s:
        prog.emit("cvt.rn.f32.s32", si, si)


def run(variant: str, x, causal=True):
    kernels._attention_int8qk.cache_clear()
    int8_qk.emit_float_scores = ORIGINAL if variant == "magic" else cvt_scores
    fn = lambda: zyfa.flash_attn_func(**x.kwargs(), causal=causal, backend="ptx")  # noqa: E731
    out = fn()
    torch.cuda.synchronize()
    return fn, out


ORIGINAL = int8_qk.emit_float_scores
target.OPS["cvt.rn.f32.s32"] = "cvt.rn.f32.s32 {0}, {1};"
rows = []
for name, (B, S, Hq, Hkv, D, Dv) in {"Mistral-7B 16K": (1, 16384, 32, 8, 128, 128),
                                     "DeepSeek-V2-Lite 16K": (1, 16384, 16, 16, 192, 128),
                                     "d128 batch 4 4K": (4, 4096, 32, 32, 128, 128)}.items():
    q, k, v = make("realistic", B, S, Hq, Hkv, D, Dv, seed=5, device="cuda")
    xi, xe = zyfa.quantize_int8_qk(q, k, v), zyfa.quantize_fp8(q, k, v)
    calls = {}
    for variant in ("magic", "cvt"):
        fn, out = run(variant, xi)
        calls[variant] = (fn, out)
    # the kernels are cached per variant: rebuild each before its turn (cheap: assembled PTX cached in-process)
    e4m3 = lambda: zyfa.flash_attn_func(**xe.kwargs(), causal=True, p_rule="exact", backend="ptx")  # noqa: E731
    running = lambda: zyfa.flash_attn_func(**xe.kwargs(), causal=True, p_rule="exact", ref_rule="running",  # noqa: E731
                                           backend="ptx")
    same = torch.equal(calls["magic"][1], calls["cvt"][1])
    flops = 2 * B * Hq * (S * (S + 1) / 2) * (D + Dv)
    times = {k: [] for k in ("magic", "cvt", "e4m3", "running")}
    for _ in range(3):
        for variant in ("magic", "cvt"):
            fn, _ = run(variant, xi)
            times[variant].append(triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median"))
        times["e4m3"].append(triton.testing.do_bench(e4m3, warmup=50, rep=300, return_mode="median"))
        times["running"].append(triton.testing.do_bench(running, warmup=50, rep=300, return_mode="median"))
    best = {k: min(v) for k, v in times.items()}
    rows.append(dict(case=name, bit_equal=same, ms=best, tflops={k: flops / t / 1e9 for k, t in best.items()}))
    print(f"{name:22s} bit-equal {same}  " + "  ".join(f"{k} {flops / t / 1e9:.0f}" for k, t in best.items()),
          flush=True)
out = os.environ.get("OUT", ".")
with open(os.path.join(out, "int8_convert_ab.json"), "w") as f:
    json.dump(dict(gpu=torch.cuda.get_device_name(), rows=rows), f, indent=1)
sys.exit(0)
