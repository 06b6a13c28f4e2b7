"""Lab A/B (not for the package), exit status 3 when the turns lose on average: the fast mode's two FP8 consumers taking turns to issue their
GEMM phases (specialized.RUNNING_TURNS) against not, timed in turns in one process beside the
default exact kernel and FA3 FP8; outputs compared bit for bit (turns change no arithmetic)."""
import json
import os

import torch
import triton.testing

import zyfa
from zyfa.activations import make
from zyfa.asm.ptx import kernels, specialized


def build(turns: bool, x):
    kernels._attention.cache_clear()
    specialized.RUNNING_TURNS = turns
    fn = lambda: zyfa.flash_attn_func(**x.kwargs(), causal=True, p_rule="exact", ref_rule="running",  # noqa: E731
                                      backend="ptx")
    out = fn()
    torch.cuda.synchronize()
    return fn, out


def fa3_call(x):
    import fa3_fwd_interface
    v = x.v.contiguous()
    return lambda: fa3_fwd_interface.flash_attn_func(x.q, x.k, v, causal=True, q_descale=x.q_descale,
                                                     k_descale=x.k_descale, v_descale=x.v_descale)


bench = lambda fn: triton.testing.do_bench(fn, warmup=50, rep=400, return_mode="median")  # noqa: E731
rows = []
for name, (B, S, Hq, Hkv, D, Dv) in {"Mistral-7B 16K": (1, 16384, 32, 8, 128, 128),
                                     "d128 32 heads 32K": (1, 32768, 32, 32, 128, 128),
                                     "DeepSeek-V2-Lite 16K": (1, 16384, 16, 16, 192, 128),
                                     "d256 batch 4 8K": (4, 8192, 8, 8, 256, 256)}.items():
    q, k, v = make("realistic", B, S, Hq, Hkv, D, Dv, seed=11, device="cuda")
    x = zyfa.quantize_fp8(q, k, v)
    del q, k, v
    outs = {t: build(t, x)[1] for t in (False, True)}
    same = torch.equal(outs[False], outs[True])
    flops = 2 * B * Hq * (S * (S + 1) / 2) * (D + Dv)
    fa3 = fa3_call(x)
    exact = lambda: zyfa.flash_attn_func(**x.kwargs(), causal=True, p_rule="exact", backend="ptx")  # noqa: E731
    times = {k: [] for k in ("no_turns", "turns", "exact", "fa3")}
    for _ in range(3):
        for t in (False, True):
            fn, _ = build(t, x)
            times["turns" if t else "no_turns"].append(bench(fn))
        times["exact"].append(bench(exact))
        times["fa3"].append(bench(fa3))
    tf = {k: flops / min(v) / 1e9 for k, v in times.items()}
    rows.append(dict(case=name, bit_equal=same, tflops=tf, ms=times))
    print(f"{name:22s} bit-equal {same}  " + "  ".join(f"{k} {t:.0f}" for k, t in tf.items())
          + f"  turns/fa3 {tf['turns'] / tf['fa3']:.3f} no_turns/fa3 {tf['no_turns'] / tf['fa3']:.3f}", flush=True)
with open(os.path.join(os.environ.get("OUT", "."), "turns_ab.json"), "w") as f:
    json.dump(dict(gpu=torch.cuda.get_device_name(), rows=rows), f, indent=1)
gain = sum(r["tflops"]["turns"] / r["tflops"]["no_turns"] for r in rows) / len(rows)
print(f"turns / no turns, mean over the cases: {gain:.4f}")
raise SystemExit(0 if gain >= 1.0 else 3)
