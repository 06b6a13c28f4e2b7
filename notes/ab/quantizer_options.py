"""End-to-end error of each quantize_fp8 option, and of quantize_int8_qk, against float64
attention on the unquantized inputs (GQA 8/2, d128, causal), with float64 math on the
dequantized inputs (quantization alone) and through the FP8 spec (quantization + kernel
arithmetic, P rule lean_cubic, block references). CPU only.

    python notes/ab/quantizer_options.py [--seqlen 1024]
"""
import argparse


from zyfa.activations import make
from zyfa.quantize import quantize_fp8, quantize_int8_qk
from zyfa.spec.reference import attention_fp64, fp8_attention_spec


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqlen", type=int, default=1024)
    a = ap.parse_args()
    opts = [dict(), dict(granularity="fine"), dict(smooth_k=True), dict(hadamard=True),
            dict(smooth_k=True, hadamard=True), dict(granularity="fine", smooth_k=True, hadamard=True)]
    print("| input | option | quantization alone | with the FP8 spec (lean_cubic, block) |")
    print("|---|---|---|---|")
    for kind in ("gaussian", "realistic"):
        q, k, v = make(kind, 1, a.seqlen, 8, 2, 128, seed=1)
        ref = attention_fp64(q, k, v)
        for o in opts + [None]:
            x = quantize_int8_qk(q, k, v) if o is None else quantize_fp8(q, k, v, **o)
            deq = attention_fp64(*x.dequantized())
            spec = fp8_attention_spec(**x.kwargs(rotated_v=True), p_rule="lean_cubic")
            name = ("quantize_int8_qk" if o is None else
                    ", ".join(f"{k}={v}" for k, v in o.items()) or "head (FA3 layout)")
            print(f"| {kind} | {name} | {rel(x.restore_output(deq.float()), ref):.3e} | "
                  f"{rel(x.restore_output(spec.float()), ref):.3e} |", flush=True)


if __name__ == "__main__":
    main()
