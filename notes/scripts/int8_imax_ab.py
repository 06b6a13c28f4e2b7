"""Lab A/B (not for the package), session n: the INT8 Q.K^T kernel's row max on the int32 scores
(the scores converted after it; masked ones hold int8_qk.MASKED_SCORE) against the float row max
of a baseline commit, whose PTX is generated on the CPU beforehand. Timed in turns in one
process beside FA3 FP8 (5 rounds, do_bench medians); outputs compared bit for bit (the same
spec: the max of exact integers is the max of their floats). Prediction (SASS counts on the
CPU): 26 of 713 loop instructions fewer at d64-d192, static stall cycles -19%; +2-5% at
Mistral-7B 16K; d256 spills 8 bytes with it, so it may lose there.

    python notes/scripts/int8_imax_ab.py --prepare HEAD       # CPU: build/lab/int8_base_ptx.json
    PYTHONPATH=.:notes/scripts python notes/scripts/int8_imax_ab.py [--quick]   # GPU (carry build/lab)

--quick: Mistral-7B 16K and DeepSeek-V2-Lite 16K only, 3 rounds.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BASE = os.path.join(ROOT, "build", "lab", "int8_base_ptx.json")
DIMS = (64, 128, 192, 256)
_GEN = """
import json, sys
from zyfa.asm.ptx import attention as attn
out = {}
for d in %r:
    name, ptx = attn.attention_kernel("exact", True, d, "sm_90a", int8_qk=True)
    out[str(d)] = dict(name=name, ptx=ptx, shared_bytes=attn.layout_for(d, dv=attn.fp8_dv(d), int8_qk=True).shared_bytes)
json.dump(out, sys.stdout)
""" % (DIMS,)
CASES = {"Mistral-7B 16K": (1, 16384, 32, 8, 128, 128), "DeepSeek-V2-Lite 16K": (1, 16384, 16, 16, 192, 128),
         "d128 batch 4 4K": (4, 4096, 32, 32, 128, 128), "d64 batch 4 8K": (4, 8192, 32, 32, 64, 64),
         "d256 batch 4 8K": (4, 8192, 8, 8, 256, 256)}


def prepare(ref: str) -> None:
    with tempfile.TemporaryDirectory() as tree:
        archive = subprocess.run(["git", "archive", ref, "zyfa"], cwd=ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
        doc = subprocess.run([sys.executable, "-c", _GEN], cwd=tree, check=True, capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": tree}).stdout
    with open(BASE, "w") as f:
        f.write(doc)
    print(f"wrote {BASE} ({ref})")


def main() -> None:
    import torch

    import zyfa
    from ab_common import fa3_call, first_out, tflops_in_turns
    from zyfa.activations import make
    from zyfa.asm.ptx import kernels
    from zyfa.asm.ptx.assemble import assemble
    from zyfa.asm.ptx.loader import Kernel

    base_ptx = json.load(open(BASE))
    base_kernels = {}
    new_kernel = kernels._attention_int8qk

    def base_kernel(rule, causal, dqk, arch, device, window=False):
        assert rule == "exact" and causal and not window
        if dqk not in base_kernels:
            b = base_ptx[str(dqk)]
            base_kernels[dqk] = Kernel(assemble(b["ptx"], arch).cubin, b["name"], torch.device("cuda", device),
                                       b["shared_bytes"])
        return base_kernels[dqk]

    def call(x, which):
        def fn():
            kernels._attention_int8qk = base_kernel if which == "base" else new_kernel
            try:
                return zyfa.flash_attn_func(**x.kwargs(), causal=True, backend="ptx")
            finally:
                kernels._attention_int8qk = new_kernel
        return fn

    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    rows = []
    quick = "--quick" in sys.argv
    cases = {n: c for n, c in CASES.items() if not quick or n.endswith("16K")}
    for name, (B, S, Hq, Hkv, D, Dv) in cases.items():
        q, k, v = make("realistic", B, S, Hq, Hkv, D, Dv, seed=7, device="cuda")
        xi, xe = zyfa.quantize_int8_qk(q, k, v), zyfa.quantize_fp8(q, k, v)
        del q, k, v
        calls = {"fa3": fa3_call(xe), "base": call(xi, "base"), "imax": call(xi, "imax")}
        ob, on = first_out(calls["base"]()), first_out(calls["imax"]())
        equal = torch.equal(ob, on)
        del ob, on
        tf, times = tflops_in_turns(calls, 2 * B * Hq * (S * (S + 1) / 2) * (D + Dv), rounds=3 if quick else 5)
        med = {kk: sorted(t)[len(t) // 2] for kk, t in times.items()}
        rows.append(dict(case=name, bit_equal=equal, tflops=tf, ms=times))
        print(f"{name:22s} bit-equal {equal}  base {tf['base']:.0f} imax {tf['imax']:.0f} fa3 {tf['fa3']:.0f} TFLOP/s"
              f"  imax/base fastest {tf['imax'] / tf['base']:.3f} median {med['base'] / med['imax']:.3f}"
              f"  x fa3: base {tf['base'] / tf['fa3']:.3f} / {med['fa3'] / med['base']:.3f},"
              f" imax {tf['imax'] / tf['fa3']:.3f} / {med['fa3'] / med['imax']:.3f}", flush=True)
        del xi, xe, calls
        torch.cuda.empty_cache()
    with open(os.path.join(os.environ.get("OUT", "."), "int8_imax_ab.json"), "w") as fh:
        json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__,
                       date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), rows=rows), fh, indent=1)


if __name__ == "__main__":
    prepare(sys.argv[2]) if sys.argv[1:2] == ["--prepare"] else main()
