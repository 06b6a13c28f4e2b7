"""Seeded random cases on the GPU paths: Triton, the generated PTX kernel (sm_90), backend="auto".

    python bench/fuzz_gpu.py [--paths triton,ptx,auto] [--cases 500] [--out fuzz.json]
    python bench/fuzz_gpu.py --cpu            # tiny cases on the CPU (reference, Triton's interpreter)

The cases, bounds and checks are zyfa.verify.fuzz's (tests/verify/test_fuzz.py runs the same
generator on the CPU paths); the "gpu" profile draws seqlens up to ~4100 with odd lengths,
batch x heads up to 32, and compares the last 192 query rows against float64 (computed on
the GPU). Cases that share a kernel (zyfa.verify.fuzz.compile_key) run in the same one of
--jobs worker processes, so each compilation happens once and the compilations run in
parallel. The Triton kernel takes its tuned table's tile or its default tile
(ZYFA_TRITON_AUTOTUNE=0): autotuning every untuned key would compile every candidate tile.

Prints one line per failing case (with a reproducer) and a summary table; writes the JSON
summary only where --out says. Exit status: 0 all cases ok or rightly refused, 1 some case
failed (a wrong or missing error), 2 some case was silently wrong (a result outside its
bound, NaN/Inf, wrong shape/dtype/layout, or a misuse accepted).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def _parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--paths", default=None, help="comma-separated: triton, ptx, auto (GPU); reference, triton (--cpu)")
    ap.add_argument("--cases", type=int, default=None, help="cases per path (default 500 on the GPU, 4 with --cpu)")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="write the JSON summary here (default: print only)")
    ap.add_argument("--cpu", action="store_true", help="tiny cases on the CPU: reference and Triton's interpreter")
    ap.add_argument("--jobs", type=int, default=None, help="GPU worker processes (default: CPUs - 2)")
    ap.add_argument("--verbose", action="store_true", help="print every case")
    a = ap.parse_args(argv)
    a.paths = (a.paths or ("reference,triton" if a.cpu else "triton,ptx,auto")).split(",")
    a.cases = a.cases if a.cases is not None else (4 if a.cpu else 500)
    return a


def _worker(cases):
    os.environ["ZYFA_TRITON_AUTOTUNE"] = "0"
    import torch
    torch.set_num_threads(1)
    from zyfa.verify.fuzz import run_case
    outcomes = [run_case(c, "cuda") for c in cases]
    torch.cuda.synchronize()
    return outcomes


def _shares(cases, jobs: int) -> list[list]:
    """The cases split over ``jobs`` workers, cases sharing a kernel in one worker, largest
    groups first onto the least loaded worker."""
    from zyfa.verify.fuzz import compile_key
    groups = {}
    for i, c in enumerate(cases):
        groups.setdefault(compile_key(c) or ("none", i), []).append(c)
    shares = [[] for _ in range(jobs)]
    for g in sorted(groups.values(), key=len, reverse=True):
        min(shares, key=len).extend(g)
    return [s for s in shares if s]


def _run_parallel(cases, jobs: int):
    import concurrent.futures as cf
    import multiprocessing as mp
    with cf.ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
        results = list(pool.map(_worker, _shares(cases, jobs)))
    return [o for r in results for o in r]


def _table(summary) -> str:
    head = f"{'path':16s} {'cases':>6s} {'ok':>5s} {'refused':>8s} {'fail':>5s} {'silent':>7s} " \
           f"{'err/bound':>10s} {'lse/bound':>10s} {'seconds':>8s}  backends"
    lines = [head, "-" * len(head)]
    for path, p in summary["paths"].items():
        backends = ", ".join(f"{k} {v}" for k, v in sorted(p["backends"].items()))
        lines.append(f"{path:16s} {p['cases']:6d} {p['ok']:5d} {p['refused']:8d} {p['fail']:5d} {p['silent']:7d} "
                     f"{p['worst_ratio']:10.3f} {p['worst_lse_ratio']:10.3f} {p['seconds']:8.1f}  {backends}")
    return "\n".join(lines)


def main(argv=None) -> int:
    a = _parse(argv)
    if a.cpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")      # before any kernel module is imported
    import torch
    from zyfa.verify.fuzz import draw_case, run_case, summarize
    if not a.cpu and not torch.cuda.is_available():
        print("no CUDA GPU found; use --cpu for the tiny CPU run", file=sys.stderr)
        return 1
    device, profile = ("cpu", "cpu") if a.cpu else ("cuda", "gpu")
    cases = [draw_case(p, s, profile) for p in a.paths for s in range(a.first_seed, a.first_seed + a.cases)]
    where = "CPU (Triton interpreter)" if a.cpu else torch.cuda.get_device_name()
    print(f"zyfa fuzz on {where}: {len(cases)} cases, paths {', '.join(a.paths)}, seeds "
          f"{a.first_seed}..{a.first_seed + a.cases - 1}", flush=True)
    t0 = time.perf_counter()
    if a.cpu:
        outcomes = [run_case(case, device) for case in cases]
    else:
        outcomes = _run_parallel(cases, a.jobs if a.jobs is not None else max(1, (os.cpu_count() or 4) - 2))
    for o in outcomes:
        if o.status == "fail" or a.verbose:
            repro = f"\n    repro: {o.case.repro()}" if o.status == "fail" else ""
            print(f"{'SILENT ' if o.silent else ''}{o}{repro}", flush=True)
    if device == "cuda":
        torch.cuda.synchronize()
    summary = summarize(outcomes)
    summary.update(device=where, profile=profile, seeds=[a.first_seed, a.first_seed + a.cases],
                   wall_seconds=round(time.perf_counter() - t0, 1))
    print(_table(summary))
    print(f"{summary['wall_seconds']}s wall (seconds column: the cases' own time, compilation included)")
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            json.dump(summary, f, indent=1)
        print(f"summary written to {a.out}")
    fails = [o for o in outcomes if o.status == "fail"]
    return 2 if any(o.silent for o in fails) else 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
