"""One GPU session for the Triton path (kernel error and repeatability also for `--backend ptx`): correctness, P-bit exactness, tile tuning,
speed beside FlashAttention-3 / SDPA, kernel-only error, long-context error, repeatability.

    python bench/h200_session.py --out DIR [--quick]

Prints a table last and writes DIR/h200_session.json (and DIR/tuned_h200.json).
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import sys
import time

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import zyfa  # noqa: E402
from zyfa import fp8 as F  # noqa: E402
from zyfa.activations import make  # noqa: E402
from zyfa.bench.cases import attention_flops as flops  # noqa: E402
from zyfa.bench.measure import rel_err as rel  # noqa: E402
from zyfa.reference import attention_fp64, fp8_attention_spec  # noqa: E402
from zyfa.triton_kernels import launch as L  # noqa: E402
from zyfa.triton_kernels import tuning as T  # noqa: E402
from zyfa.triton_kernels.p_rules import P_RULE_IDS, p_fp8  # noqa: E402

LOG = []


def log(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    LOG.append(s)


def bench_ms(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


# ---------------------------------------------------------------- P bits on the GPU
@triton.jit
def _p_bits_kernel(Y, OUT, N, P_RULE: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    y = tl.load(Y + i, mask=i < N)
    tl.store(OUT + i, p_fp8(y, P_RULE).to(tl.int8, bitcast=True), mask=i < N)


def check_p_bits(rec):
    n = 1 << 22
    y = -torch.rand(n, device="cuda") * 16
    y[:1000] = -torch.arange(1000, device="cuda").float() / 64       # exact integers and ties
    for rule, rid in P_RULE_IDS.items():
        out = torch.empty(n, dtype=torch.int8, device="cuda")
        _p_bits_kernel[(triton.cdiv(n, 1024),)](y, out, n, P_RULE=rid, BLOCK=1024)
        spec = F.p_bits(y.cpu(), rule, fused=True)
        got = out.cpu().to(torch.int32) & 0xFF
        mism = int((got != spec).sum())
        rec.append(dict(check="p_bits", rule=rule, n=n, mismatches=mism))
        log(f"p_bits {rule:10s} mismatches {mism} / {n}")


# ---------------------------------------------------------------- correctness
def check_correctness(rec):
    shapes = [  # B, Sq, Sk, Hq, Hkv, D, Dv, causal
        (1, 1000, 1000, 8, 2, 128, 128, True), (2, 77, 333, 4, 1, 128, 128, True),
        (1, 1, 513, 4, 4, 64, 64, True), (1, 512, 512, 4, 2, 256, 256, True),
        (1, 700, 700, 4, 4, 192, 128, True), (1, 300, 450, 4, 2, 128, 128, False),
        (1, 1, 1, 2, 1, 128, 128, True)]
    for (B, Sq, Sk, Hq, Hkv, D, Dv, causal) in shapes:
        q, k, v = make("realistic", B, Sq, Hq, Hkv, D, Dv, seqlen_k=Sk, seed=Sq + Sk, device="cuda")
        ref = attention_fp64(q, k, v, causal=causal)
        o = zyfa.flash_attn_func(q, k, v, causal=causal, backend="triton")
        base = attention_fp64(q.float(), k.float(), v.float(), causal=causal).bfloat16()
        x = zyfa.quantize_fp8(q, k, v)
        ref8 = attention_fp64(*x.dequantized(), causal=causal)
        r = dict(check="correctness", shape=[B, Sq, Sk, Hq, Hkv, D, Dv, causal],
                 bf16_err=rel(o, ref), bf16_out_rounding=rel(base, ref), nan=bool(o.isnan().any()))
        for rule in ("lean_cubic", "exact", "lean"):
            o8, l8 = zyfa.flash_attn_func(**x.kwargs(), causal=causal, p_rule=rule, return_lse=True,
                                          backend="triton")
            s8, sl = fp8_attention_spec(**x.kwargs(), causal=causal, p_rule=rule, return_lse=True)
            r[f"{rule}_vs_spec"] = rel(o8, s8)
            r[f"{rule}_lse_vs_spec"] = (l8.double() - sl).abs().max().item()
            r[f"{rule}_kernel_err"] = rel(o8, ref8)
        rec.append(r)
        log("correct", r["shape"], " ".join(f"{k}={v:.2e}" for k, v in r.items() if isinstance(v, float)))


# ---------------------------------------------------------------- tuning + speed
def fa3():
    try:
        import fa3_fwd_interface
        return fa3_fwd_interface.flash_attn_func
    except Exception as e:  # noqa: BLE001
        log("FA3 missing:", repr(e))
        return None


def tune_key(q, k, v, is_fp8, causal, cands, kwargs):
    D, Dv = q.shape[-1], v.shape[-1]
    results = {}
    for cfg in cands:
        if not T.keep(cfg, D, Dv, is_fp8):
            continue
        try:
            fn = lambda: L.triton_attention(q, k, v, causal=causal, config=cfg, **kwargs)  # noqa: E731
            fn()
            torch.cuda.synchronize()
            results[cfg] = bench_ms(fn)
        except Exception as e:  # noqa: BLE001
            log("  config failed", cfg, type(e).__name__, str(e)[:100])
    best = min(results, key=results.get)
    return best, results


def speed(rec, tuned, quick):
    fa = fa3()
    cases = [  # name, B, S, Hq, Hkv, D, Dv, input
        ("32K d128 MHA", 1, 32768, 32, 32, 128, 128, "realistic"),
        ("16K GQA 32/8", 1, 16384, 32, 8, 128, 128, "realistic"),
        ("16K MLA 192/128", 1, 16384, 16, 16, 192, 128, "realistic"),
        ("4K B4 d128", 4, 4096, 32, 32, 128, 128, "gaussian"),
    ]
    if quick:
        cases = cases[:1]
    cands = [T.TileConfig(*c) for c in [(128, 64, 8, 2), (128, 64, 8, 3), (128, 128, 8, 2), (128, 128, 8, 3),
                                        (64, 128, 4, 2), (64, 64, 4, 3), (128, 64, 4, 2)]]
    for name, B, S, Hq, Hkv, D, Dv, kind in cases:
        q, k, v = make(kind, B, S, Hq, Hkv, D, Dv, seed=7, device="cuda")
        x = zyfa.quantize_fp8(q, k, v)
        fl = flops(B, Hq, S, S, D, Dv, True)
        row = dict(case=name, B=B, S=S, Hq=Hq, Hkv=Hkv, D=D, Dv=Dv, input=kind, flops=fl)
        # tune once per dtype with the default P rule, then time every rule on that tile
        best8, res8 = tune_key(x.q, x.k, x.v, True, True, cands,
                               dict(q_descale=x.q_descale, k_descale=x.k_descale, v_descale=x.v_descale))
        tuned[T.tuning_key("sm90", True, D, Dv, True, S)] = list(dataclasses.astuple(best8))
        row["tiles_fp8"] = {str(dataclasses.astuple(c)): fl / ms / 1e9 for c, ms in res8.items()}
        for rule in F.P_RULES:
            fn = lambda: L.triton_attention(x.q, x.k, x.v, causal=True, q_descale=x.q_descale,  # noqa: E731
                                            k_descale=x.k_descale, v_descale=x.v_descale,
                                            p_rule=rule, config=best8)
            row[f"zyfa_fp8_{rule}"] = fl / bench_ms(fn) / 1e9
        bestb, resb = tune_key(q, k, v, False, True, cands, {})
        tuned[T.tuning_key("sm90", False, D, Dv, True, S)] = list(dataclasses.astuple(bestb))
        row["zyfa_bf16"] = fl / resb[bestb] / 1e9
        if fa is not None:
            qf, kf, vf = x.q, x.k, x.v.contiguous()
            row["fa3_fp8"] = fl / bench_ms(lambda: fa(qf, kf, vf, causal=True, q_descale=x.q_descale,
                                                     k_descale=x.k_descale, v_descale=x.v_descale)) / 1e9
            row["fa3_bf16"] = fl / bench_ms(lambda: fa(q, k, v, causal=True)) / 1e9
        if Hq == Hkv:
            qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
            from torch.nn.attention import SDPBackend, sdpa_kernel
            for nm, be in (("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)):
                try:
                    with sdpa_kernel(be):
                        ms = bench_ms(lambda: torch.nn.functional.scaled_dot_product_attention(
                            qt, kt, vt, is_causal=True))
                    row[nm] = fl / ms / 1e9
                except Exception as e:  # noqa: BLE001
                    row[nm] = None
                    log(nm, "failed", str(e)[:80])
        rec.append(dict(check="speed", **row))
        log("speed", name, {k: round(v) for k, v in row.items() if k.startswith(("zyfa", "fa3", "sdpa")) and v})
        del q, k, v, x
        torch.cuda.empty_cache()


# ---------------------------------------------------------------- kernel-only error
def kernel_error(rec, quick, backend="triton", rules=None):
    from zyfa.asm.ptx.attention import ATTENTION_RULES
    fa = fa3()
    rules = rules or (ATTENTION_RULES if backend == "ptx" else F.P_RULES)
    for S in ([2048] if quick else [2048, 65536]):
        for kind in ("gaussian", "realistic"):
            Hq, Hkv = 8, 2
            q, k, v = make(kind, 1, S, Hq, Hkv, 128, seed=11, device="cuda")
            x = zyfa.quantize_fp8(q, k, v)
            rows = slice(S - 1024, S) if S > 2048 else slice(0, S)
            qd, kd, vd = x.dequantized()
            ref = attention_fp64(qd[:, rows], kd, vd, causal=True)
            r = dict(check="kernel_error", S=S, input=kind, rows="last 1K" if S > 2048 else "all", backend=backend)
            for rule in rules:
                for ref_rule in (("block", "running") if S == 2048 and backend == "triton" else ("block",)):
                    o = zyfa.flash_attn_func(**x.kwargs(), p_rule=rule, ref_rule=ref_rule, backend=backend)
                    r[f"zyfa_{rule}_{ref_rule}"] = rel(o[:, rows], ref)
            if fa is not None:
                o = fa(x.q, x.k, x.v.contiguous(), causal=True, q_descale=x.q_descale,
                       k_descale=x.k_descale, v_descale=x.v_descale)
                o = o[0] if isinstance(o, tuple) else o
                r["fa3_fp8"] = rel(o[:, rows], ref)
            rec.append(r)
            log("kerr", S, kind, {k: f"{v:.3e}" for k, v in r.items() if isinstance(v, float)})
            del q, k, v, x
            torch.cuda.empty_cache()


def repeatability(rec, n, backend="triton", p_rule="lean_cubic"):
    q, k, v = make("realistic", 1, 2048, 8, 2, 128, seed=3, device="cuda")
    x = zyfa.quantize_fp8(q, k, v)
    first = zyfa.flash_attn_func(**x.kwargs(), p_rule=p_rule, backend=backend)
    diffs = 0
    t0 = time.time()
    for _ in range(n):
        o = zyfa.flash_attn_func(**x.kwargs(), p_rule=p_rule, backend=backend)
        diffs += int(not torch.equal(o.view(torch.int16), first.view(torch.int16)))
    torch.cuda.synchronize()
    rec.append(dict(check="repeatability", backend=backend, p_rule=p_rule, launches=n, differing=diffs, seconds=time.time() - t0))
    log(f"repeatability: {diffs} of {n} launches differ bitwise from the first")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="bits,correct,speed,kerr,repeat")
    ap.add_argument("--backend", default="triton", help="zyfa backend for kerr and repeat: triton or ptx")
    ap.add_argument("--p-rule", default="lean_cubic", help="P rule of the repeatability check")
    ap.add_argument("--rules", default=None, help="comma-separated P rules of the kernel-error check (default: all)")
    a = ap.parse_args()
    only = a.only.split(",")
    rec, tuned = [], {}
    meta = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(), gpu=torch.cuda.get_device_name(),
                torch=torch.__version__, triton=triton.__version__, cuda=torch.version.cuda,
                cudnn=torch.backends.cudnn.version(), python=platform.python_version())
    try:
        import fa3_fwd_interface  # noqa: F401
        meta["fa3"] = "fa3-fwd 0.0.3"
    except Exception:  # noqa: BLE001
        meta["fa3"] = None
    log(meta)
    steps = [("bits", lambda: check_p_bits(rec)), ("correct", lambda: check_correctness(rec)),
             ("kerr", lambda: kernel_error(rec, a.quick, a.backend, a.rules and a.rules.split(","))),
             ("repeat", lambda: repeatability(rec, 7200, a.backend, a.p_rule)),
             ("speed", lambda: speed(rec, tuned, a.quick))]
    for name, fn in steps:
        if name in only:
            t0 = time.time()
            try:
                fn()
            except Exception as e:  # noqa: BLE001
                import traceback
                log(f"STEP {name} FAILED: {e!r}")
                log(traceback.format_exc()[-2000:])
            log(f"[{name} took {time.time() - t0:.0f}s]")
            with open(os.path.join(a.out, "h200_session.json"), "w") as f:
                json.dump(dict(meta=meta, records=rec, log=LOG), f, indent=1, default=str)
    with open(os.path.join(a.out, "tuned_h200.json"), "w") as f:
        json.dump(tuned, f, indent=1)
    log("\n=== summary (TFLOP/s) ===")
    for r in rec:
        if r["check"] == "speed":
            log(r["case"], {k: round(v) for k, v in r.items() if k.startswith(("zyfa", "fa3", "sdpa")) and v})


if __name__ == "__main__":
    main()
