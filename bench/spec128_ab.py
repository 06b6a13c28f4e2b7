"""Branch ptx-fp8-specialized-d128, to delete once measured: the FP8 specialized kernel (producer
and two pipelined consumers) with the serial kernel's diet (the reference update deferred to
a warp-uniform branch, the loop emitted below the band and in it) run at d128 in place of
the serial kernel, against main's serial d128 and main's MLA, in one process: main's tree
under _exp/main_tree/zyfa imported as zyfa_main, FA3 beside. The specialized kernel's outputs
must equal the serial kernel's bit for bit (checked first on edge shapes: odd lengths, one
query, Sq < Sk, not causal, GQA, every P rule the bench uses).

    python bench/spec128_ab.py OUT.json
"""
import importlib.util, json, os, sys
import torch
import zyfa
from zyfa.activations import make
from zyfa.bench.cases import attention_flops
from zyfa.bench.measure import median_ms
import zyfa.asm.ptx.attention as attention
import zyfa.asm.ptx.kernels as branch
from zyfa.asm.ptx.layout import Layout
import fa3_fwd_interface as fa3

MAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "_exp", "main_tree", "zyfa")
spec = importlib.util.spec_from_file_location("zyfa_main", os.path.join(MAIN, "__init__.py"),
                                              submodule_search_locations=[MAIN])
sys.modules["zyfa_main"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sys.modules["zyfa_main"])
import zyfa_main.asm.ptx.kernels as main                                   # noqa: E402

serial_layout = attention.layout_for                                       # this branch: d128 specialized


def specialized_d128(dqk, dtype="e4m3", dv=128, packed=False):
    return Layout(dqk, 2, 4, packed=packed) if dtype == "e4m3" and dqk == 128 else serial_layout(dqk, dtype, dv, packed)


attention.layout_for = specialized_d128


def inputs(B, S, Sk, Hq, Hkv, D, Dv, seed):
    q = make("realistic", B, S, Hq, Hkv, D, Dv, seed=seed, device="cuda")[0].bfloat16()
    _, k, v = (t.bfloat16() for t in make("realistic", B, Sk, Hq, Hkv, D, Dv, seed=seed + 1, device="cuda"))
    return zyfa.quantize_fp8(q, k, v)


def run(m, x, causal, rule="exact"):
    return m.attention_fp8(x.q, x.k, x.v, None, causal, x.q_descale, x.k_descale, x.v_descale, p_rule=rule)


checks = []
for B, S, Sk, Hq, Hkv, D, causal in [(1, 300, 300, 4, 4, 128, True), (2, 1000, 1000, 8, 2, 128, True),
                                     (1, 77, 513, 4, 1, 128, True), (1, 1, 100, 4, 2, 128, True),
                                     (1, 513, 700, 4, 2, 128, False), (1, 333, 400, 4, 4, 192, True),
                                     (2, 129, 129, 16, 16, 192, False)]:
    x = inputs(B, S, Sk, Hq, Hkv, D, 128, seed=S)
    for rule in ("exact", "lean_cubic"):
        same = all(torch.equal(a_, b_) for a_, b_ in zip(run(main, x, causal, rule), run(branch, x, causal, rule)))
        checks.append(dict(shape=[B, S, Sk, Hq, Hkv, D, causal], rule=rule, bit_equal=same))
        print(f"check {B} {S} {Sk} {Hq}/{Hkv} d{D} {'causal' if causal else 'full'} {rule}: bit-equal {same}",
              flush=True)

SHAPES = [("Mistral 16K", 1, 16384, 32, 8, 128), ("d128 32 heads 32K", 1, 32768, 32, 32, 128),
          ("batch 4 4K", 4, 4096, 32, 32, 128), ("d128 8K", 4, 8192, 16, 16, 128),
          ("d128 2K", 16, 2048, 16, 16, 128), ("d128 1K", 32, 1024, 16, 16, 128),
          ("MLA 16K", 1, 16384, 16, 16, 192), ("MLA 4K", 8, 4096, 16, 16, 192)]
rows = []
for name, B, S, Hq, Hkv, D in SHAPES:
    x = inputs(B, S, S, Hq, Hkv, D, 128, seed=0)
    flops = attention_flops(B, Hq, S, S, D, 128, True)
    v8 = x.v.contiguous()
    same = all(torch.equal(a_, b_) for a_, b_ in zip(run(main, x, True), run(branch, x, True)))
    ms = {}
    for rep in range(2):                          # alternate, best of two medians
        for label, fn in (("main", lambda: run(main, x, True)), ("branch", lambda: run(branch, x, True)),
                          ("fa3", lambda: fa3.flash_attn_func(x.q, x.k, v8, causal=True, q_descale=x.q_descale,
                                                              k_descale=x.k_descale, v_descale=x.v_descale))):
            ms[label] = min(ms.get(label, 1e9), median_ms(fn))
    tf = {k_: flops / v_ / 1e9 for k_, v_ in ms.items()}
    rows.append(dict(case=name, tflops=tf, bit_equal=same))
    print(f"fp8 {name:18s} main {tf['main']:5.0f}  branch {tf['branch']:5.0f} ({tf['branch'] / tf['main'] - 1:+.1%})"
          f"  FA3 {tf['fa3']:5.0f}  bit-equal {same}", flush=True)
    torch.cuda.empty_cache()
json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, checks=checks, rows=rows),
          open(sys.argv[1], "w"), indent=1)
