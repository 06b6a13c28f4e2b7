"""Branch fp8-host-time, to delete once measured: where the host time of a flash_attn_func call
goes (and of a varlen call, whose tables now take two copies instead of five), and what it
costs in `zyfa bench` (do_bench starts timing before the call's Python runs, so host time
beyond its L2 flush shows). One process: main's tree (_exp/main_tree/zyfa, as zyfa_main) and
this branch's, FA3 beside.

  host us   wall time of 50 calls while a sleeping kernel keeps the GPU busy (no call waits)
  do_bench  zyfa bench's timer (ms); "graph": a CUDA graph of the call, the device's time alone

    python bench/host_time.py OUT.json
"""
import importlib.util
import json
import os
import sys
import time

import torch
import zyfa
from zyfa.activations import make
from zyfa.bench.cases import attention_flops
from zyfa.bench.measure import median_ms
import zyfa.asm.ptx.kernels as K
from zyfa.asm.ptx.loader import tensor_map
from zyfa.hopper_vt import hopper_vt
from zyfa.spec.descales import head_factor, per_channel_v_descale
from zyfa.validation import validate
from zyfa import dispatch
from zyfa.api import _problem
from zyfa.ops import flash_attn_op, run_backend
import fa3_fwd_interface as fa3

MAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "_exp", "main_tree", "zyfa")
spec = importlib.util.spec_from_file_location("zyfa_main", os.path.join(MAIN, "__init__.py"),
                                              submodule_search_locations=[MAIN])
zm = importlib.util.module_from_spec(spec)
sys.modules["zyfa_main"] = zm
spec.loader.exec_module(zm)


def host_us(fn, n=50):
    fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(200_000_000)                  # ~0.1 s of GPU time queued ahead of the calls
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    return t


def graph_ms(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return median_ms(g.replay)


rows = []
for name, dt, B, S, Hq, Hkv, D in [("fp8 d128 1K", "fp8", 32, 1024, 16, 16, 128),
                                   ("fp8 d128 2K", "fp8", 16, 2048, 16, 16, 128),
                                   ("fp8 Mistral 16K", "fp8", 1, 16384, 32, 8, 128),
                                   ("bf16 d128 1K", "bf16", 32, 1024, 16, 16, 128)]:
    q, k, v = (t.bfloat16() for t in make("realistic", B, S, Hq, Hkv, D, D, seed=0, device="cuda"))
    flops = attention_flops(B, Hq, S, S, D, D, True)
    calls, steps = {}, {}
    if dt == "fp8":
        x = zyfa.quantize_fp8(q, k, v)
        kw = x.kwargs()
        v8 = x.v.contiguous()
        calls["main"] = lambda: zm.flash_attn_func(**kw, return_lse=True, backend="ptx")
        calls["branch"] = lambda: zyfa.flash_attn_func(**kw, return_lse=True, backend="ptx")
        calls["kernel call"] = lambda: K.attention_fp8(x.q, x.k, x.v, None, True, x.q_descale, x.k_descale, x.v_descale)
        calls["fa3"] = lambda: fa3.flash_attn_func(x.q, x.k, v8, causal=True, q_descale=x.q_descale,
                                                   k_descale=x.k_descale, v_descale=x.v_descale)
        args = (x.q, x.k, x.v, None, True, x.q_descale, x.k_descale, x.v_descale, "exact", "block", "ptx")
        q8 = x.q.view(torch.uint8)
        steps = {"validate": lambda: validate(x.q, x.k, x.v, True, None, x.q_descale, x.k_descale, x.v_descale),
                 "select": lambda: dispatch.select(_problem(x.q, x.k, x.v, True, "exact", "block", True, x.q_descale,
                                                            x.k_descale), "ptx"),
                 "custom op + backend": lambda: flash_attn_op(*args), "backend": lambda: run_backend(*args),
                 "head_factor": lambda: head_factor(x.q_descale, x.k_descale, B, Hkv, 0.1, q.device),
                 "v descale": lambda: per_channel_v_descale(x.v_descale, B, Hkv, D),
                 "hopper_vt": lambda: hopper_vt(x.v),
                 "tensor_map": lambda: tensor_map(q8, (1, 64, 1, 128), 128),
                 "torch.empty out": lambda: torch.empty(B, S, Hq, D, dtype=torch.bfloat16, device="cuda")}
    else:
        calls["main"] = lambda: zm.flash_attn_func(q, k, v, return_lse=True, backend="ptx")
        calls["branch"] = lambda: zyfa.flash_attn_func(q, k, v, return_lse=True, backend="ptx")
        calls["kernel call"] = lambda: K.attention_16(q, k, v, None, True)
        calls["fa3"] = lambda: fa3.flash_attn_func(q, k, v, causal=True)
    same = all(torch.equal(a_, b_) for a_, b_ in zip(calls["main"](), calls["branch"]()))
    host = {n: host_us(f) for n, f in calls.items()}
    step_us = {n: host_us(f) for n, f in steps.items()}
    ms = {}
    for rep in range(2):                          # alternate, best of two medians
        for n, f in calls.items():
            ms[n] = min(ms.get(n, 1e9), median_ms(f))
    ms["graph"] = graph_ms(calls["branch"])
    tf = {n: flops / m / 1e9 for n, m in ms.items()}
    rows.append(dict(case=name, host_us=host, step_us=step_us, ms=ms, tflops=tf, bit_equal=same))
    print(f"{name}: bit-equal {same}\n  host us " + ", ".join(f"{n} {u:.0f}" for n, u in host.items())
          + "\n  TFLOP/s " + ", ".join(f"{n} {t:.0f}" for n, t in tf.items())
          + ("\n  steps us " + ", ".join(f"{n} {u:.1f}" for n, u in step_us.items()) if step_us else ""), flush=True)
    torch.cuda.empty_cache()
# zyfa bench's packed batch (16 sequences, 64K tokens): the varlen call's tables in 2 copies, not 5
from zyfa.bench.cases import VARLEN_LENGTHS                               # noqa: E402
lens = list(VARLEN_LENGTHS)
g = torch.Generator(device="cuda").manual_seed(0)
q = torch.randn(sum(lens), 32, 128, device="cuda", generator=g).bfloat16()
k, v = (torch.randn(sum(lens), 8, 128, device="cuda", generator=g).bfloat16() for _ in range(2))
x = zyfa.quantize_fp8(q[None], k[None], v[None])
cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)
ds = {f"{t}_descale": getattr(x, f"{t}_descale").expand(len(lens), -1).contiguous() for t in "qkv"}
cud = cu.cuda()
for dt, args, kw in (("fp8", (x.q[0], x.k[0], x.v[0]), ds), ("bf16", (q, k, v), {})):
    calls = {n: (lambda m=m, a=args, kw=kw: m.flash_attn_varlen_func(*a, cu, cu, max(lens), max(lens),
                                                                      backend="ptx", **kw))
             for n, m in (("main", zm), ("branch", zyfa))}
    v8 = x.v[0].contiguous()
    calls["fa3"] = ((lambda: fa3.flash_attn_varlen_func(x.q[0], x.k[0], v8, cud, cud, max(lens), max(lens), causal=True,
                                                        **ds)) if dt == "fp8" else
                    (lambda: fa3.flash_attn_varlen_func(q, k, v, cud, cud, max(lens), max(lens), causal=True)))
    same = torch.equal(calls["main"](), calls["branch"]())
    host = {n: host_us(f) for n, f in calls.items()}
    flops = sum(2 * 32 * (m * (m + 1) // 2) * 2 * 128 for m in lens)
    ms = {}
    for rep in range(2):
        for n, f in calls.items():
            ms[n] = min(ms.get(n, 1e9), median_ms(f))
    tf = {n: flops / m / 1e9 for n, m in ms.items()}
    rows.append(dict(case=f"{dt} varlen 16 seqs", host_us=host, ms=ms, tflops=tf, bit_equal=same))
    print(f"{dt} varlen 16 seqs: bit-equal {same}\n  host us " + ", ".join(f"{n} {u:.0f}" for n, u in host.items())
          + "\n  TFLOP/s " + ", ".join(f"{n} {t:.0f}" for n, t in tf.items()), flush=True)
json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), open(sys.argv[1], "w"),
          indent=1)
