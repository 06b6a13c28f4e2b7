"""Seeded random cases on the GPU paths: Triton, the generated PTX kernel (sm_90), backend="auto".

    python bench/fuzz_gpu.py [--paths triton,ptx,auto] [--cases 500] [--out fuzz.json]
    python bench/fuzz_gpu.py --cpu            # tiny cases on the CPU (reference, Triton's interpreter)

The cases, bounds and checks are zyfa.verify.fuzz's (tests/test_fuzz.py runs the same
generator on the CPU paths); the "gpu" profile draws seqlens up to ~4100 with odd lengths,
batch x heads up to 32, and compares the last 192 query rows against float64 (computed on
the GPU). Before the checked run, each distinct kernel is compiled once by --jobs worker
processes (Triton's on-disk cache is shared) and threads (the PTX kernels' ptxas), so the
run is not serialized on compilation.

No full run (500 cases a path) is recorded yet; compiling the distinct kernels takes
minutes and can dominate it.

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
    ap.add_argument("--jobs", type=int, default=None, help="compile warm-up processes (default: CPUs - 2; 0: none)")
    ap.add_argument("--verbose", action="store_true", help="print every case")
    a = ap.parse_args(argv)
    a.paths = (a.paths or ("reference,triton" if a.cpu else "triton,ptx,auto")).split(",")
    a.cases = a.cases if a.cases is not None else (4 if a.cpu else 500)
    return a


def _warm_worker(cases):
    import torch
    torch.set_num_threads(1)
    from zyfa.verify.fuzz import warm
    return warm(cases, "cuda")


def _warm_up(cases, jobs: int) -> str:
    """Compile every distinct kernel once before the checked run."""
    import concurrent.futures as cf
    import multiprocessing as mp
    from zyfa.verify.fuzz import compile_key, warm
    reps = {}
    for c in cases:
        key = compile_key(c)
        if key is not None and key not in reps:
            reps[key] = c
    triton = [c for k, c in reps.items() if k[0] == "triton"]
    ptx = [c for k, c in reps.items() if k[0] == "ptx"]
    t0 = time.perf_counter()
    # ptxas runs in subprocesses, ~tens of seconds a generated kernel: one thread each
    with cf.ThreadPoolExecutor(max(1, min(len(ptx), os.cpu_count() or 8))) as threads:
        ptx_done = [threads.submit(warm, [c], "cuda") for c in ptx]
        if triton and jobs > 0:
            chunks = [triton[i::jobs] for i in range(jobs) if triton[i::jobs]]
            with cf.ProcessPoolExecutor(len(chunks), mp_context=mp.get_context("spawn")) as pool:
                list(pool.map(_warm_worker, chunks))
        for f in ptx_done:
            f.result()
    return f"warm-up: {len(triton)} Triton and {len(ptx)} PTX kernels in {time.perf_counter() - t0:.1f}s"


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
    if not a.cpu:
        jobs = a.jobs if a.jobs is not None else max(1, (os.cpu_count() or 4) - 2)
        print(_warm_up(cases, jobs), flush=True)
    t1 = time.perf_counter()
    outcomes = []
    for i, case in enumerate(cases):
        o = run_case(case, device)
        outcomes.append(o)
        if o.status == "fail" or a.verbose:
            print(f"{'SILENT ' if o.silent else ''}{o}" + (f"\n    repro: {case.repro()}" if o.status == "fail" else ""),
                  flush=True)
        if (i + 1) % 250 == 0:
            print(f"  {i + 1}/{len(cases)} cases, {time.perf_counter() - t1:.0f}s", flush=True)
    if device == "cuda":
        torch.cuda.synchronize()
    summary = summarize(outcomes)
    summary.update(device=where, profile=profile, seeds=[a.first_seed, a.first_seed + a.cases],
                   warm_up_seconds=round(t1 - t0, 1), run_seconds=round(time.perf_counter() - t1, 1))
    print(_table(summary))
    print(f"warm-up {summary['warm_up_seconds']}s, checked run {summary['run_seconds']}s")
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            json.dump(summary, f, indent=1)
        print(f"summary written to {a.out}")
    fails = [o for o in outcomes if o.status == "fail"]
    return 2 if any(o.silent for o in fails) else 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
