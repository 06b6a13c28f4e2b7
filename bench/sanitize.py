"""Every default GPU kernel once, on small shapes, for compute-sanitizer (memcheck, racecheck,
synccheck): the generated Hopper FP8 kernel (serial d64 / d128, specialized MLA / d256 / d128
from 16K keys, every P rule, causal and not; K read in slot order where the keys are a multiple
of 16, else V^T rewritten), its INT8 Q.K^T variant (d64, d128 and from 16K keys, MLA, d256) and
16-bit kernel (d64, d128, MLA, d256; BF16 and FP16), their packed (varlen) variants (also short
dense batches, which run on them), the Triton attention kernels (FP8 exact, INT8, BF16; d64 /
d128 / MLA / d256) and the fused quantizer. Each output is checked against float64 (the
quantizer against the PyTorch quantizer's bits) so a run that "passes" the sanitizer also
computed the right thing.

    /usr/local/cuda/bin/compute-sanitizer --tool memcheck python3 bench/sanitize.py
    ... python3 bench/sanitize.py --dtypes bf16,fp16        # only the 16-bit kernels (no quantizer)
    ... python3 bench/sanitize.py --backends ptx             # only the generated kernels
    python3 bench/sanitize.py --backends ptx --dtypes fp8 --ref-rules running --repeats 1000   # the fast mode,
                                                             # 1,000 launches a case, bit for bit
    python3 bench/sanitize.py --backends ptx --dtypes int8 --repeats 1000       # the INT8 Q.K^T kernels
"""
from __future__ import annotations

import argparse
import sys

import torch

import zyfa
from zyfa.activations import make
from zyfa.bench.measure import rel_err
from zyfa.spec.reference import attention_fp64, fp8_attention_spec
from zyfa.verify.fuzz.checks import FP8_FLOOR, K_FP8
from zyfa.spec.rules import DEFAULT_P_RULE, DEFAULT_REF_RULE, P_RULES

PTX_SHAPES = [((1, 200, 300, 2, 1, 128, 128), True), ((1, 130, 130, 2, 2, 128, 128), False),
              ((1, 200, 300, 2, 1, 192, 128), True), ((1, 130, 130, 2, 2, 192, 128), False),
              ((1, 200, 300, 2, 1, 64, 64), True), ((1, 150, 150, 2, 1, 256, 256), True),
              ((1, 200, 16384, 2, 1, 128, 128), True),     # d128's long-key layout (layout.LONG_KEYS)
              # keys a multiple of 16: K's rows in slot order (kernels._slot_rows; the others rewrite V^T)
              ((2, 200, 320, 2, 1, 128, 128), True), ((1, 128, 128, 2, 2, 128, 128), False),
              ((1, 200, 304, 2, 1, 192, 128), True), ((1, 160, 160, 2, 1, 64, 64), True),
              ((1, 144, 144, 2, 1, 256, 256), True)]
CASES = [("ptx", "fp8", shape, causal, rule) for rule in P_RULES for shape, causal in PTX_SHAPES] + [
    ("ptx", "fp8", shape, causal, "exact", "running") for shape, causal in PTX_SHAPES] + [   # the fast mode
    # backend, dtype, (B, Sq, Sk, Hq, Hkv, D, Dv), causal, P rule
    ("ptx", "bf16", (1, 200, 300, 2, 1, 128, 128), True),
    ("ptx", "bf16", (1, 130, 130, 2, 2, 128, 128), False),
    ("ptx", "fp16", (1, 150, 150, 2, 1, 64, 64), True),
    ("ptx", "bf16", (1, 150, 170, 2, 2, 192, 128), True),
    ("ptx", "bf16", (1, 150, 150, 2, 1, 256, 256), True),
    ("ptx", "bf16", (3, 200, 300, 2, 1, 128, 128), True),        # short dense batches: the packed
    ("ptx", "fp16", (2, 150, 150, 2, 2, 64, 64), False),          # kernel (kernels.PACKED_ROUTE_KEYS)
    ("ptx", "bf16", (16, 512, 512, 8, 2, 128, 128), True),       # 512 tiles: each CTA runs several,
    ("ptx", "fp16", (16, 512, 512, 8, 8, 64, 64), False),         # a tile's last P V with the next's S
    ("ptx", "int8", (1, 200, 300, 2, 1, 128, 128), True),        # INT8 Q.K^T (quantize_int8_qk's inputs)
    ("ptx", "int8", (1, 130, 130, 2, 2, 128, 128), False),
    ("ptx", "int8", (1, 200, 300, 2, 1, 192, 128), True),
    ("ptx", "int8", (1, 150, 150, 2, 1, 64, 64), True),
    ("ptx", "int8", (1, 150, 150, 2, 1, 256, 256), True),
    ("ptx", "int8", (1, 200, 16384, 2, 1, 128, 128), True),      # the long-key layout
    ("triton", "int8", (1, 200, 300, 2, 1, 128, 128), True),
    ("triton", "fp8", (1, 200, 300, 2, 1, 128, 128), True),
    ("triton", "fp8", (1, 150, 150, 2, 1, 192, 128), True),
    ("triton", "fp8", (1, 150, 150, 2, 1, 64, 64), False),
    ("triton", "bf16", (1, 200, 300, 2, 1, 128, 128), True),
    ("triton", "bf16", (1, 150, 150, 2, 2, 256, 256), True),
    ("triton", "bf16", (1, 150, 150, 2, 1, 192, 128), False),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="fp8,int8,bf16,fp16", help="the input types whose kernels run")
    ap.add_argument("--backends", default="ptx,triton", help="the backends whose kernels run")
    ap.add_argument("--ref-rules", default="block,running", help="the FP8 reference rules whose kernels run "
                    "(running: the fast mode)")
    ap.add_argument("--repeats", type=int, default=1, help="launches of each FP8 / INT8 case; every output bit for "
                    "bit the first's")
    ap.add_argument("--slot-keys", action="store_true", help="only the E4M3 shapes whose keys are a multiple of "
                    "16 (K's rows in slot order): a sanitizer's shorter pass over the slot-order kernels")
    a = ap.parse_args()
    dtypes, backends, ref_rules = a.dtypes.split(","), a.backends.split(","), a.ref_rules.split(",")
    failed = 0
    for backend, dtype, (B, Sq, Sk, Hq, Hkv, D, Dv), causal, *rule in CASES:
        if dtype not in dtypes or backend not in backends:
            continue
        p_rule = rule[0] if rule else DEFAULT_P_RULE
        ref_rule = rule[1] if len(rule) > 1 else DEFAULT_REF_RULE
        if dtype == "fp8" and ref_rule not in ref_rules or a.slot_keys and (dtype != "fp8" or Sk % 16):
            continue
        q, k, v = make("realistic", B, Sq, Hq, Hkv, D, Dv, seqlen_k=Sk, seed=1, device="cuda")
        if dtype in ("fp8", "int8"):
            x = zyfa.quantize_fp8(q, k, v) if dtype == "fp8" else zyfa.quantize_int8_qk(q, k, v)
            out = zyfa.flash_attn_func(**x.kwargs(), causal=causal, backend=backend, p_rule=p_rule, ref_rule=ref_rule)
            differ = sum(not torch.equal(out, zyfa.flash_attn_func(**x.kwargs(), causal=causal, backend=backend,
                                                                    p_rule=p_rule, ref_rule=ref_rule))
                         for _ in range(a.repeats - 1))
            if differ:
                print(f"{differ} of {a.repeats - 1} repeats differ from the first launch: WRONG", flush=True)
                failed += 1
            ref = attention_fp64(*x.dequantized(), causal=causal)
            spec = fp8_attention_spec(**x.kwargs(), causal=causal, p_rule=p_rule, ref_rule=ref_rule)
            bound = K_FP8 * rel_err(spec, ref) + FP8_FLOOR      # the fuzz test's bound for its P rule
        else:
            q, k, v = (t.to(torch.float16 if dtype == "fp16" else torch.bfloat16) for t in (q, k, v))
            out = zyfa.flash_attn_func(q, k, v, causal=causal, backend=backend)
            ref = attention_fp64(q, k, v, causal=causal)
            bound = 1e-2
        torch.cuda.synchronize()
        err = rel_err(out, ref)
        ok = err <= bound and bool(torch.isfinite(out).all())
        failed += not ok
        rules = p_rule + " " + ref_rule if dtype in ("fp8", "int8") else ""
        print(f"{backend:7s} {dtype:5s} {rules:22s} B{B} Sq{Sq} Sk{Sk} H{Hq}/{Hkv} "
              f"d{D}/{Dv} causal={causal}: err {err:.2e} (bound {bound:.2e}) {'ok' if ok else 'WRONG'}", flush=True)
    for opts in ({}, {"smooth_k": True, "hadamard": True}) if "fp8" in dtypes and "triton" in backends else ():
        q, k, v = make("realistic", 1, 150, 4, 2, 128, seqlen_k=150, seed=2, device="cuda")
        a, b = zyfa.quantize_fp8(q, k, v, **opts), zyfa.quantize_fp8(q, k, v, fused=True, **opts)
        torch.cuda.synchronize()
        same = all(torch.equal(getattr(a, n).view(torch.uint8), getattr(b, n).view(torch.uint8)) and
                   torch.equal(getattr(a, n + "_descale"), getattr(b, n + "_descale")) for n in "qkv")
        failed += not same
        print(f"quantizer fused {'+'.join(opts) or 'plain':18s}: {'bits equal the PyTorch path' if same else 'WRONG'}",
              flush=True)
    failed += _packed_batches(dtypes) if "ptx" in backends else 0
    return 1 if failed else 0


def _packed_batches(dtypes) -> int:
    """The generated kernels' packed (varlen) variants: a batch of lengths 1, 130 and 77 in one
    launch, equal bit for bit to a call a sequence."""
    failed = 0
    lens = [1, 130, 77]
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device="cuda")
    for dtype, D in (("fp8", 64), ("fp8", 128), ("fp8", 192), ("fp8", 256), ("bf16", 128), ("bf16", 256)):
        if dtype not in dtypes:
            continue
        Dv = 128 if D == 192 else D
        q, k, v = (t[0] for t in make("realistic", 1, sum(lens), 2, 1, D, Dv, seed=3, device="cuda"))
        if dtype == "fp8":
            x = zyfa.quantize_fp8(q[None], k[None], v[None])
            q, k, v = x.q[0], x.k[0], x.v[0]
            scales = dict(q_descale=x.q_descale.expand(len(lens), -1), k_descale=x.k_descale.expand(len(lens), -1),
                          v_descale=x.v_descale.expand(len(lens), -1))
            one = dict(q_descale=x.q_descale, k_descale=x.k_descale, v_descale=x.v_descale)
        else:
            q, k, v = (t.to(torch.bfloat16) for t in (q, k, v))
            scales, one = {}, {}
        out = zyfa.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True, backend="ptx", **scales)
        parts = [zyfa.flash_attn_func(q[None, a:b], k[None, a:b], v[None, a:b], causal=True, backend="ptx", **one)[0]
                 for a, b in zip(cu.tolist(), cu.tolist()[1:])]
        torch.cuda.synchronize()
        same = torch.equal(out, torch.cat(parts))
        failed += not same
        print(f"ptx packed {dtype:5s} d{D}/{Dv} lengths {lens}: {'equal to a call a sequence' if same else 'WRONG'}",
              flush=True)
    return failed


if __name__ == "__main__":
    sys.exit(main())
