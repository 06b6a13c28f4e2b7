"""`python -m zyfa.verify.gfx950`: the generated MI355X kernel, run instruction by instruction in
zyfa's gfx950 emulator on small realistic inputs, against float64 and the bit-level spec."""
from __future__ import annotations

import time

from ...activations import realistic
from ...bench.measure import rel_err
from ...quantize import quantize_fp8
from ...spec.reference import attention_fp64, fp8_attention_spec
from .attention import emulate_attention


def main(seqlen: int = 256) -> None:
    q, k, v = realistic(1, seqlen, 4, 2, 128, seed=0)
    x = quantize_fp8(q, k, v)
    ref = attention_fp64(q, k, v, causal=True)
    spec = fp8_attention_spec(**x.kwargs(), p_rule="lean_cubic", block_n=64)
    print(f"gfx950 kernel (lean_cubic, 64-key blocks) in the emulator: seqlen {seqlen}, heads 4/2, d128, causal")
    t0 = time.perf_counter()
    out, _ = emulate_attention(**x.kwargs())
    print(f"  error vs float64 on the unquantized inputs {rel_err(out, ref):.3e}; "
          f"vs the spec on the same FP8 inputs {rel_err(out, spec):.3e} ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
