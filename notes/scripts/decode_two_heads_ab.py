"""Run 59 part (session q): two kv heads a program (notes/ab/gluon_decode/two_heads.py) beside the
package's Gluon kernel (one head a program, 128-key tiles, two stages; the diff applied), FA3 FP8
and a device copy, GQA 32/8 d128, one query, E4M3 q with descales.

Prediction (before the run): if the H100's E4M3 decode is held at ~2.6 TB/s by 128-byte pieces
(decode_layout_ab.py's d64 BF16 answers that), two heads a program read 256 contiguous bytes a
key back to back and reach 2.75-2.9 TB/s (>= 1.1x FA3 FP8) at 32 x 8K and 8 x 32K; if not, they
sit with the package kernel (within 3%), or below it where one program an SM (64 keys, 3
stages: 121 KB) leaves too few loads in flight. Checks: output within the rounding plus 1e-3
of decode_fp8_spec over 64-key tiles, one split.

    OUT=/tmp/out python notes/scripts/decode_two_heads_ab.py
"""
import json
import os
import sys

import torch
import triton

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "ab", "gluon_decode"))
import zyfa  # noqa: E402
from two_heads import two_heads_decode  # noqa: E402
from zyfa.spec.kv_cache import decode_fp8_spec  # noqa: E402
from decode_fp8_gpu import _e4m3_head, _fa3  # noqa: E402  (notes/scripts, this script's folder)

DEV, HQ, HKV, D = "cuda", 32, 8, 128


def inputs(B, Sk, seed=0):
    gen = torch.Generator(device=DEV).manual_seed(seed + B)
    k8, kd = _e4m3_head(torch.randn(B, Sk, HKV, D, generator=gen, device=DEV))
    v8, vd = _e4m3_head(torch.randn(B, Sk, HKV, D, generator=gen, device=DEV))
    q8, qd = _e4m3_head(torch.randn(B, 1, HQ, D, generator=gen, device=DEV).view(B, 1, HKV, -1))
    return dict(q=q8.view(B, 1, HQ, D), k_cache=k8, v_cache=v8, q_descale=qd, k_descale=kd, v_descale=vd)


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def main():
    res = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, checks=[], rows=[])
    a = inputs(4, 4224, seed=7)
    lens = [1, 17, 1000, 4099]
    sl = torch.tensor(lens, dtype=torch.int32, device=DEV)
    for bn, st in ((64, 2), (64, 3), (128, 2)):
        o, _ = two_heads_decode(a["q"], a["k_cache"], a["v_cache"], sl, a["q_descale"], a["k_descale"],
                                a["v_descale"], block_n=bn, stages=st)
        ro, _ = decode_fp8_spec(a["q"], a["k_cache"], a["v_cache"], lens, q_descale=a["q_descale"],
                                k_descale=a["k_descale"], v_descale=a["v_descale"], causal=True, block_n=bn)
        res["checks"].append(dict(block_n=bn, stages=st, err_spec=_rel(o, ro), ok=_rel(o, ro) < 4e-3))
        print("check", res["checks"][-1], flush=True)
    fa3 = _fa3()
    for B, Sk in ((32, 8192), (128, 2048), (8, 32768)):
        a = inputs(B, Sk)
        sl = torch.full((B,), Sk, dtype=torch.int32, device=DEV)
        nbytes = B * Sk * HKV * 2 * D
        splits = {32: 1, 128: 1, 8: 4}[B]
        fns = {"package gluon": lambda: zyfa.flash_attn_with_kvcache(cache_seqlens=sl, causal=True, **a)}
        if fa3 is not None:
            fns["fa3"] = lambda: fa3(cache_seqlens=sl, causal=True, **a)
        for bn, st in ((64, 2), (64, 3), (128, 2)):
            fns[f"two heads n{bn} s{st}"] = lambda bn=bn, st=st: two_heads_decode(
                a["q"], a["k_cache"], a["v_cache"], sl, a["q_descale"], a["k_descale"], a["v_descale"],
                splits=splits, block_n=bn, stages=st)
        dk = torch.empty_like(a["k_cache"])
        fns["copy"] = lambda: (dk.copy_(a["k_cache"]), dk.copy_(a["v_cache"]))
        for name, fn in fns.items():
            try:
                fn()
                ms = triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="median")
                gbps = nbytes / ms / 1e6 * (2 if name == "copy" else 1)
                res["rows"].append(dict(B=B, Sk=Sk, method=name, ms=ms, gbps=gbps))
            except Exception as e:  # noqa: BLE001  (record, go on)
                res["rows"].append(dict(B=B, Sk=Sk, method=name, error=str(e)[:300]))
            print(res["rows"][-1], flush=True)
    os.makedirs(os.environ.get("OUT", "out"), exist_ok=True)
    json.dump(res, open(os.path.join(os.environ.get("OUT", "out"), "decode_two_heads_ab.json"), "w"), indent=1)
    print("\n| B x Sk | method | us | GB/s |")
    for r in res["rows"]:
        print(f"| {r['B']} x {r['Sk']} | {r['method']} | " +
              (f"{r['ms'] * 1e3:.1f} | {r['gbps']:.0f} |" if "ms" in r else f"error {r['error'][:60]} |"))
    sys.exit(0 if all(c["ok"] for c in res["checks"]) else 1)


if __name__ == "__main__":
    main()
