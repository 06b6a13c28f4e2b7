"""Kernel-only error over long contexts and bitwise repeatability of one zyfa path, with
FlashAttention-3 on the same inputs in the same process (the issues' error and determinism bars).

    python notes/ab/error_repeat.py --backend ptx --dtype fp8 --out fp8.json     # 2K and 64K, 7,200 launches
    python notes/ab/error_repeat.py --backend ptx --dtype bf16 --out bf16.json

Error: relative Frobenius norm against float64 attention on the values the kernel read (FP8:
the dequantized E4M3 inputs; BF16: the BF16 inputs), GQA 8/2, d128, causal, Gaussian and
realistic inputs; all rows up to 2K tokens, the last 1K rows beyond. Repeatability: a realistic
2K case launched ``--launches`` times, each output compared bit for bit with the first.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import torch  # noqa: E402

import zyfa  # noqa: E402
from zyfa.activations import make  # noqa: E402
from zyfa.bench.measure import rel_err  # noqa: E402
from zyfa.spec.reference import attention_fp64  # noqa: E402

HQ, HKV, D = 8, 2, 128


def _inputs(kind, S, dtype, device):
    q, k, v = make(kind, 1, S, HQ, HKV, D, seed=11, device=device)
    if dtype == "fp8":
        x = zyfa.quantize_fp8(q, k, v)
        return x.kwargs(), tuple(t for t in x.dequantized()), x
    return dict(q=q, k=k, v=v), (q, k, v), None


def _fa3(kw, x, dtype):
    try:
        import fa3_fwd_interface as fa3
    except ImportError:
        return None
    if dtype == "fp8":
        out = fa3.flash_attn_func(x.q, x.k, x.v.contiguous(), causal=True, q_descale=x.q_descale,
                                  k_descale=x.k_descale, v_descale=x.v_descale)
    else:
        out = fa3.flash_attn_func(kw["q"], kw["k"], kw["v"], causal=True)
    return out[0] if isinstance(out, tuple) else out


def errors(backend, dtype, seqlens, last_rows, device, p_rule=None):
    rows_out = []
    rules = {"p_rule": p_rule} if p_rule and dtype == "fp8" else {}
    for S in seqlens:
        for kind in ("gaussian", "realistic"):
            kw, values, x = _inputs(kind, S, dtype, device)
            rows = slice(S - last_rows, S) if S > 2 * last_rows else slice(0, S)
            ref = attention_fp64(values[0][:, rows], values[1], values[2], causal=True)
            out = zyfa.flash_attn_func(**kw, causal=True, backend=backend, **rules)
            rec = dict(S=S, input=kind, rows=f"{rows.start}..{rows.stop}", zyfa=rel_err(out[:, rows], ref))
            fa = _fa3(kw, x, dtype) if device != "cpu" else None
            if fa is not None:
                rec["fa3"] = rel_err(fa[:, rows], ref)
                rec["zyfa_over_fa3"] = rec["zyfa"] / rec["fa3"]
            rows_out.append(rec)
            print(json.dumps(rec), flush=True)
            del kw, values, x, out
            if device != "cpu":
                torch.cuda.empty_cache()
    return rows_out


def repeatability(backend, dtype, launches, S, device, p_rule=None):
    kw, _, _ = _inputs("realistic", S, dtype, device)
    rules = {"p_rule": p_rule} if p_rule and dtype == "fp8" else {}
    first = zyfa.flash_attn_func(**kw, causal=True, backend=backend, **rules)
    differing, t0 = 0, time.time()
    for _ in range(launches):
        out = zyfa.flash_attn_func(**kw, causal=True, backend=backend, **rules)
        differing += int(not torch.equal(out.view(torch.int16), first.view(torch.int16)))
    rec = dict(launches=launches, S=S, differing=differing, seconds=time.time() - t0)
    print(json.dumps(rec), flush=True)
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--dtype", choices=("fp8", "bf16"), default="fp8")
    ap.add_argument("--p-rule", default=None, help="FP8 P rule (default: zyfa's)")
    ap.add_argument("--seqlens", default="2048,65536")
    ap.add_argument("--last-rows", type=int, default=1024)
    ap.add_argument("--launches", type=int, default=7200)
    ap.add_argument("--repeat-seqlen", type=int, default=2048)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    doc = dict(device=torch.cuda.get_device_name() if device == "cuda" else "cpu", torch=torch.__version__,
               backend=a.backend, dtype=a.dtype, p_rule=a.p_rule,
               errors=errors(a.backend, a.dtype, [int(s) for s in a.seqlens.split(",")], a.last_rows, device,
                             a.p_rule),
               repeatability=repeatability(a.backend, a.dtype, a.launches, a.repeat_seqlen, device, a.p_rule))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
