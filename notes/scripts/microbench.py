"""Instruction throughput on this GPU, from the generated kernels of zyfa.verify.ptx.microbench:
results per clock per SM for FADD, FFMA, FMNMX, PRMT, MUFU.EX2, the FP8 pack conversion
(cvt ... e4m3x2, F2FP) and HFMA2, the units a softmax without exp2 can be built from.

    python notes/scripts/microbench.py --out DIR        (prints a table; writes DIR/microbench.json)
"""
from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from zyfa.asm.ptx.assemble import assemble  # noqa: E402
from zyfa.asm.ptx.loader import Kernel  # noqa: E402
from zyfa.verify.ptx.microbench import OPS, microbench_kernel  # noqa: E402

CHAINS, ITERS, THREADS, CTAS_PER_SM = 16, 4096, 256, 8


def sm_clock_mhz():
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        return pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
    except Exception:  # noqa: BLE001  (no NVML: report per nanosecond only)
        return None


def time_kernel(kernel, sms):
    out = torch.empty(sms * CTAS_PER_SM * THREADS, dtype=torch.int32, device="cuda")
    args = [ctypes.c_uint64(out.data_ptr()), ctypes.c_uint32(ITERS)]
    grid = (sms * CTAS_PER_SM,)
    for _ in range(3):
        kernel(grid, (THREADS,), args)
    times = []
    for _ in range(7):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        kernel(grid, (THREADS,), args)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e6)          # ns
    clock = sm_clock_mhz()
    return sorted(times)[len(times) // 2], clock


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for op in OPS:
        name, ptx = microbench_kernel(op, CHAINS)
        ns, clock = time_kernel(Kernel(assemble(ptx).cubin, name, torch.device("cuda", 0)), sms)
        rows.append(dict(op=op, ns=ns, clock_mhz=clock))
    base = rows[0]["ns"]                                  # fadd: the per-round input update alone
    work = sms * CTAS_PER_SM * THREADS * ITERS * CHAINS   # instructions of the op under test
    for r in rows:
        extra = r["ns"] - (0 if r["op"] == "fadd" else base)
        r["per_ns_per_sm"] = work / max(extra, 1e-9) / sms
        r["per_clock_per_sm"] = r["per_ns_per_sm"] * 1e3 / r["clock_mhz"] if r["clock_mhz"] else None
        # the whole kernel's rate: a bound when the op's pipe overlaps the FADDs
        r["raw_per_clock_per_sm"] = work / r["ns"] / sms * 1e3 / r["clock_mhz"] if r["clock_mhz"] else None
    doc = dict(date=datetime.date.today().isoformat(), gpu=torch.cuda.get_device_name(), sms=sms,
               chains=CHAINS, iters=ITERS, threads=THREADS, ctas_per_sm=CTAS_PER_SM, rows=rows,
               note="per_clock_per_sm of an op other than fadd is computed from its time minus the fadd kernel's")
    with open(os.path.join(a.out, "microbench.json"), "w") as f:
        json.dump(doc, f, indent=1)
    print(f"{'op':12s} {'kernel ms':>10s} {'SM MHz':>7s} {'net /clock/SM':>14s} {'raw /clock/SM':>14s}")
    for r in rows:
        net, raw = (None if x is None else round(x, 1) for x in (r["per_clock_per_sm"], r["raw_per_clock_per_sm"]))
        print(f"{r['op']:12s} {r['ns'] / 1e6:10.3f} {r['clock_mhz'] or 0:7d} {net!s:>14s} {raw!s:>14s}")


if __name__ == "__main__":
    main()
