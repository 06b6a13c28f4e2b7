"""Hashes of the machine code every default kernel compiles to, to show that a change of the
Python around them changes no kernel: the SASS of each default generated Hopper kernel (FP8
and 16-bit, dense and packed; kernel name normalized away) and P-code kernel, the gfx950 assembly of each generated variant, and
the Triton kernel's PTX / AMDGCN for the tuned configs (debug info and comments stripped).

    python -m zyfa.verify.fingerprint NEW.json [--compare OLD.json] [--no-triton]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re

from ..asm.gfx950.attention import attention_kernel as gfx950_kernel
from ..asm.gfx950.lean_p import p_codes_kernel as gfx950_p_codes
from ..asm.ptx.assemble import assemble
from ..asm.ptx.attention import HEAD_DIMS, HEAD_DIMS_16
from ..asm.ptx.attention import attention_kernel as ptx_kernel
from ..asm.ptx.attention import attention_kernel_16 as ptx_kernel_16
from ..asm.ptx.lean_p import PTX_RULES
from ..asm.ptx.lean_p import p_codes_kernel as ptx_p_codes
from ..spec.rules import DEFAULT_P_RULE, LEAN_RULES, P_RULES

# the Triton kernel as the H200 table and the interpreter-free gfx950 compile use it
TRITON_CASES = [
    dict(target="sm90", fp8=True, p_rule="exact", block_m=64, block_n=128, num_warps=4, num_stages=3,
         hw_round=True, wgmma_key_order=True),
    dict(target="sm90", fp8=True, p_rule="exact", block_m=64, block_n=128, num_warps=4, num_stages=3, hw_round=True),
    dict(target="sm90", fp8=True, p_rule="lean_cubic", block_m=64, block_n=128, num_warps=4, num_stages=3),
    dict(target="sm90", fp8=True, p_rule="exact", head_dim=192, block_m=64, block_n=128, num_warps=4,
         num_stages=2, hw_round=True),
    dict(target="sm90", fp8=False, block_m=128, block_n=128, num_warps=8, num_stages=2),
    dict(target="gfx950", fp8=True, p_rule="lean_cubic", block_m=64, block_n=64, num_warps=4, num_stages=1),
]


def _h(text) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()[:16]


def _code_only(asm: str) -> str:
    """Triton's PTX / AMDGCN without debug sections, line info and comments (AMDGCN's .LtmpN
    labels only anchor line info: dropped, and their numbers out of references)."""
    asm = asm[:asm.find(".section")] if ".section" in asm else asm
    lines = [line.split("//")[0] for line in asm.splitlines()
             if not line.strip().startswith((".loc", ".file", "$L__", "//", ";"))
             and not re.fullmatch(r"\.Ltmp\d+:", line.strip())]
    return re.sub(r"\.Ltmp\d+", ".Ltmp", "\n".join(lines))


def fingerprints(triton: bool = True) -> dict:
    out = {}
    for rule in P_RULES:
        for causal in (True, False):
            for dqk, _ in HEAD_DIMS:
                name, ptx = ptx_kernel(rule, causal, dqk=dqk)
                out[f"ptx|{rule}|{causal}|{dqk}"] = _h(assemble(ptx).sass().replace(name, "KERNEL"))
                if rule == DEFAULT_P_RULE:      # the packed (varlen) variant, of the default rule
                    name, ptx = ptx_kernel(rule, causal, dqk=dqk, packed=True)
                    out[f"ptx_packed|{rule}|{causal}|{dqk}"] = _h(assemble(ptx).sass().replace(name, "KERNEL"))
                if dqk == 128:                  # the long-key layout (layout.long_keys)
                    name, ptx = ptx_kernel(rule, causal, dqk=dqk, long=True)
                    out[f"ptx_long|{rule}|{causal}|{dqk}"] = _h(assemble(ptx).sass().replace(name, "KERNEL"))
                if rule == DEFAULT_P_RULE:      # the INT8 Q.K^T variant
                    name, ptx = ptx_kernel(rule, causal, dqk=dqk, int8_qk=True)
                    out[f"ptx_int8qk|{rule}|{causal}|{dqk}"] = _h(assemble(ptx).sass().replace(name, "KERNEL"))
                    if dqk == 128:
                        name, ptx = ptx_kernel(rule, causal, dqk=dqk, int8_qk=True, long=True)
                        out[f"ptx_int8qk_long|{rule}|{causal}|{dqk}"] = _h(assemble(ptx).sass().replace(name, "KERNEL"))
                if rule == DEFAULT_P_RULE:      # K's rows in slot order (a dense call's usual kernel)
                    name, ptx = ptx_kernel(rule, causal, dqk=dqk, slot_keys=True)
                    out[f"ptx_slotk|{rule}|{causal}|{dqk}"] = _h(assemble(ptx).sass().replace(name, "KERNEL"))
    for dtype in ("bf16", "f16"):
        for causal in (True, False):
            for dqk, dv in HEAD_DIMS_16:
                name, ptx = ptx_kernel_16(dtype, causal, dqk, dv)
                out[f"ptx16|{dtype}|{causal}|{dqk}|{dv}"] = _h(assemble(ptx).sass().replace(name, "KERNEL"))
                if dtype == "bf16":
                    name, ptx = ptx_kernel_16(dtype, causal, dqk, dv, packed=True)
                    out[f"ptx16_packed|{dtype}|{causal}|{dqk}|{dv}"] = _h(assemble(ptx).sass().replace(name, "KERNEL"))
    for rule in PTX_RULES:
        name, ptx = ptx_p_codes(rule)
        out[f"ptx_pcodes|{rule}"] = _h(assemble(ptx).sass().replace(name, "KERNEL"))
    for rule in LEAN_RULES:
        for causal in (True, False):
            for d, dv in ((64, 64), (128, 128), (192, 128), (128, 64)):
                for ref in ("block", "block_pow2"):
                    out[f"gfx950|{rule}|{causal}|{d}|{dv}|{ref}"] = _h(gfx950_kernel(rule, causal, d, dv, ref)[1])
        out[f"gfx950_pcodes|{rule}"] = _h(gfx950_p_codes(rule)[1])
    if triton:                  # needs Triton's compiler: run without TRITON_INTERPRET
        from .triton_compile import compile_attention
        for case in TRITON_CASES:
            k = compile_attention(**case)
            out[f"triton|{json.dumps(case, sort_keys=True)}"] = _h(_code_only(k.asm["ptx" if case["target"] == "sm90" else "amdgcn"]))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m zyfa.verify.fingerprint", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--compare", help="an earlier fingerprint file: print the keys that differ")
    ap.add_argument("--no-triton", action="store_true")
    a = ap.parse_args(argv)
    new = fingerprints(not a.no_triton)
    with open(a.out, "w") as f:
        json.dump(new, f, indent=1)
    if a.compare:
        with open(a.compare) as f:
            old = json.load(f)
        differ = sorted(k for k in new if k in old and old[k] != new[k])
        print(f"{len(new)} kernels, {len(differ)} differ, {len(set(new) - set(old))} new")
        print("\n".join(differ))
        return 1 if differ else 0
    print(f"{len(new)} kernels hashed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
