"""`zyfa bench`: run the cases, record them in bench/results/<gpu>.json under today's run
(zyfa.bench.store), and write RESULTS.md and plots.

    zyfa bench [--cases quick|sweep|models|varlen|window|all] [--activations FILE] [--out DIR]

Records of an earlier run of the same day are kept unless the same (case, method) is
measured again, so a suite can be run in parts.
"""
from __future__ import annotations

import argparse
import datetime
import functools
import os
import platform
import zlib
from importlib import metadata

import torch

from .cases import Case, cases_for
from .measure import Power, graph_ms, host_ms, median_ms, rel_err
from .decode_methods import decode_methods
from .methods import Inputs, Method, prefill_methods
from .store import gpu_name, load, results_file, run_key, save_entry


def all_methods() -> list[Method]:
    """Every method `zyfa bench` knows: the prefill cases' and the decode cases'."""
    return prefill_methods() + decode_methods()


def versions(power: Power | None) -> dict:
    def pkg(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None
    import triton
    return dict(zyfa=pkg("zyfa"), torch=torch.__version__, triton=triton.__version__, cuda=torch.version.cuda,
                cudnn=torch.backends.cudnn.version(), cudnn_frontend=pkg("nvidia-cudnn-frontend"),
                fa3=pkg("fa3-fwd"), driver=power.driver() if power else None, python=platform.python_version())


def case_inputs(case: Case, device, captured=None) -> Inputs:
    if captured is not None:
        q, k, v = (t.to(device=device, dtype=torch.bfloat16) for t in (captured.q, captured.k, captured.v))
        return Inputs(case, q, k, v)
    from zyfa.activations import make
    seed = zlib.crc32(case.name.encode()) % 1000
    if case.lengths:                  # packed: one batch-1 row of all the tokens
        q, k, v = make(case.input, 1, sum(case.query_lengths), case.Hq, case.Hkv, case.D, case.Dv,
                       seqlen_k=sum(case.lengths), seed=seed, device=device)
        return Inputs(case, q, k, v)
    q, k, v = make(case.input, case.B, case.Sq, case.Hq, case.Hkv, case.D, case.Dv, seqlen_k=case.Sk,
                   seed=seed, device=device)
    return Inputs(case, q, k, v)


def _lse_err(lse, rows, ref):
    """Largest |LSE − float64 LSE| (natural log), where the method returns an LSE of FA's shape."""
    if lse is None or lse.dim() != 3 or lse[:, :, rows].shape != ref.shape:
        return None
    return (lse[:, :, rows].double() - ref).abs().max().item()


def _record(inp: Inputs, m: Method) -> dict:
    c = inp.case
    return dict(gpu=gpu_name(), date=datetime.date.today().isoformat(), method=m.method, backend=m.backend,
                p_rule=m.p_rule, ref_rule=m.ref_rule, dtype=m.dtype, label=m.label, case=c.name, group=c.group, input=c.input,
                B=c.B, Sq=c.Sq, Sk=c.Sk, Hq=c.Hq, Hkv=c.Hkv, Dqk=c.D, Dv=c.Dv, causal=c.causal,
                flops=c.flops, **({"window_size": list(c.window)} if c.window != (-1, -1) else {}))


def time_one(inp: Inputs, m: Method, timer=median_ms, host_timer=None, graph_timer=None) -> tuple[dict, object]:
    """A method's record with its speed on one case, and its (call, finish) pair for
    check_one; None where it cannot run the case or fails. The method must be available here
    (missing() None) and take the case's kind (applies). ``host_timer``: the host's own time a
    call (host_us; where it exceeds the timed ms, the GPU waited for the host and the reading
    times the host, not the kernels). ``graph_timer``: the call as a CUDA graph (graph_ms), for
    the GRAPH_GROUPS' cases."""
    c = inp.case
    rec = _record(inp, m)
    reason = m.unsupported(c)
    if reason:
        return dict(rec, status="unsupported", reason=reason), None
    try:
        built = m.build(inp)
        fn, finish = built if isinstance(built, tuple) else (built, lambda res: res)
        fn()                                       # compiles, loads, allocates: outside the timing
        rec.update(ms_rounds=[timer(fn)], status="ok")
        if graph_timer is not None and c.group in GRAPH_GROUPS:
            rec["graph_rounds"] = []
            _time_graph(rec, fn, graph_timer)
        if c.decode:             # K and V bytes the call reads (a copy's: the bytes it reads and writes)
            rec["bytes"] = c.kv_bytes(1 if m.dtype == "fp8" else 2) * (2 if m.method == "copy" else 1)
        _speeds(rec)
        if host_timer is not None:
            rec["host_us"] = host_timer(fn) * 1e3
        return rec, (fn, finish)
    except Exception as e:  # noqa: BLE001  (a failing method is recorded, never dropped)
        return dict(rec, status="failed", reason=f"{type(e).__name__}: {str(e)[:300]}"), None


# Groups whose calls are also timed as CUDA graphs: decode steps, which serving engines replay as
# graphs, and whose host work a call can outlast their kernels' (eager timings then time the host).
GRAPH_GROUPS = ("decode", "mixed")


def _time_graph(rec: dict, fn, graph_timer) -> None:
    """A round of the call as a CUDA graph into rec's graph_rounds; a call that cannot be
    captured keeps its eager timings and says why (graph_reason)."""
    if "graph_reason" in rec:
        return
    try:
        rec["graph_rounds"].append(graph_timer(fn))
    except Exception as e:  # noqa: BLE001
        rec["graph_reason"] = f"{type(e).__name__}: {str(e)[:300]}"


def _speeds(rec: dict) -> None:
    """A record's fastest round, eager (ms) and as a graph (graph_ms), and what each gives:
    TFLOP/s, and for a decode record GB/s of the bytes it reads."""
    timings = [("ms", "", rec["ms_rounds"])]
    if rec.get("graph_rounds"):
        timings.append(("graph_ms", "graph_", rec["graph_rounds"]))
    for key, prefix, rounds in timings:
        rec[key] = min(rounds)
        rec[prefix + "tflops"] = rec["flops"] / rec[key] / 1e9
        if "bytes" in rec:
            rec[prefix + "gbps"] = rec["bytes"] / rec[key] / 1e6


def time_again(inp: Inputs, rec: dict, fn, timer=median_ms, graph_timer=None) -> None:
    """A further round of a timed method: its record keeps the fastest round."""
    try:
        rec["ms_rounds"].append(timer(fn))
    except Exception as e:  # noqa: BLE001
        rec.update(status="failed", reason=f"{type(e).__name__}: {str(e)[:300]}")
        return
    if graph_timer is not None and "graph_rounds" in rec:
        _time_graph(rec, fn, graph_timer)
    _speeds(rec)


def check_one(inp: Inputs, m: Method, rec: dict, call) -> None:
    """Error against float64 (end to end and kernel-only), LSE error, non-finite count and
    repeatability of a timed method, into its record."""
    fn, finish = call
    try:
        out, lse = finish(fn())
        if out is None:                    # the copy ceiling: nothing to check
            return
        again, _ = finish(fn())
        rows = inp.ref_rows()
        ref, ref_lse = inp.reference(None)
        kref, kref_lse = inp.reference(m.quant) if m.quant else (ref, ref_lse)
        rec.update(err_rows="all" if rows.start == 0 else f"last {rows.stop - rows.start}",
                   err_e2e=rel_err(out[:, rows], ref), err_kernel=rel_err(out[:, rows], kref),
                   lse_err=_lse_err(lse, rows, kref_lse),
                   nonfinite=int((~torch.isfinite(out.float())).sum()),
                   repeatable=bool(torch.equal(out, again)))
    except Exception as e:  # noqa: BLE001
        rec.update(status="failed", reason=f"{type(e).__name__}: {str(e)[:300]}")


def measure_energy(rec: dict, fn, power: Power) -> None:
    """TFLOP/J and SM clock over back-to-back calls; run after all of a case's timings so
    that one method's sustained load does not heat the card for the next one's timing."""
    try:
        joules, clock = power.measure(fn, rec["ms"])
        rec.update(tflop_per_j=None if joules is None else rec["flops"] / joules / 1e12, sm_clock_mhz=clock)
    except Exception as e:  # noqa: BLE001
        rec.update(energy_error=f"{type(e).__name__}: {str(e)[:200]}")


def _progress(items, desc):
    try:
        from tqdm import tqdm
        return tqdm(items, desc=desc)
    except ImportError:
        return items


# Rounds of timings a case, the methods taking turns; a record keeps its fastest. One round put
# whichever method came first right after the idle GPU of the inputs' making, which runs faster.
ROUNDS = 2


def run(cases: list[Case], methods: list[Method], path: str, key: str | None = None, captured=None,
        timer=median_ms, power: Power | None = None, fresh: bool = False, rounds: int = ROUNDS,
        graph_timer=None) -> dict:
    """Measure every method on every case (``rounds`` timings each, the methods taking turns);
    the records go to entry ``key`` (default: today's run) of the results file ``path``, saved
    after each case. On a GPU the host's time a call is taken too, and the GRAPH_GROUPS' calls
    are also timed as CUDA graphs (``graph_timer``, default graph_ms over ``timer``)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    host_timer = host_ms if device == "cuda" else None
    if graph_timer is None and device == "cuda":
        graph_timer = functools.partial(graph_ms, timer=timer)
    key = key or run_key()
    doc = {"versions": versions(power), "records": []}
    run_id = datetime.datetime.now().isoformat(timespec="seconds")     # which process measured a record
    earlier = load(path).get(key)
    # methods of no kind of case here (varlen, decode) are not asked at all; one that cannot run on
    # this machine (its package or the GPU missing) is asked once and listed once as unavailable,
    # not recorded case by case
    methods = [m for m in methods if any(m.applies(c) for c in cases)]
    unavailable = {m.label: reason for m in methods if (reason := m.missing())}
    if earlier and not fresh:
        doc["records"] = earlier["records"]
        gone = {m.label for m in methods}                 # asked again now: this run's answer stands
        unavailable = {**{k: r for k, r in earlier.get("unavailable", {}).items() if k not in gone}, **unavailable}
    doc["unavailable"] = unavailable
    methods = [m for m in methods if m.label not in unavailable]
    for i, case in enumerate(_progress(cases, "zyfa bench")):
        inp = case_inputs(case, device, None if captured is None else captured[i])
        # every method is timed before any float64 reference is computed: a reference (float64 over
        # every row of a short case, the case's heaviest work) run just before one method's timing
        # would skew that one. Methods of another kind of case (varlen, decode) are not asked.
        timed = [(m, *time_one(inp, m, timer, host_timer, graph_timer)) for m in methods if m.applies(case)]
        for _ in range(rounds - 1):
            for m, rec, call in timed:
                if call is not None and rec["status"] == "ok":
                    time_again(inp, rec, call[0], timer, graph_timer)
        for m, rec, call in timed:
            if call is not None and rec["status"] == "ok":
                check_one(inp, m, rec, call)
            rec["run"] = run_id
            doc["records"] = [r for r in doc["records"] if (r["case"], r["label"]) != (case.name, m.label)]
            doc["records"].append(rec)
            if rec["status"] == "ok":
                speed = f"{rec['gbps']:.0f} GB/s" if "gbps" in rec else f"{rec['tflops']:.0f} TFLOP/s"
                if "graph_ms" in rec:
                    speed += f" ({rec['graph_ms']:.3f} ms as a graph)"
                shown = f"{speed}, err {rec.get('err_kernel', float('nan')):.2e}"
            else:
                shown = f"{rec['status']}: {rec['reason'][:100]}"
            print(f"  {case.name:24s} {m.label:22s} {shown}", flush=True)
        timed = [(rec, call[0]) for _, rec, call in timed if call is not None and rec["status"] == "ok"]
        if power is not None:
            for rec, fn in timed:
                measure_energy(rec, fn, power)
        del inp, timed
        if device == "cuda":
            torch.cuda.empty_cache()
        save_entry(path, key, doc)
    return doc


def capture_cases(path: str):
    from zyfa.activations import load_capture
    layers = load_capture(path)
    name = os.path.splitext(os.path.basename(path))[0]
    cases = [Case("capture", f"{name}:{c.name}", c.q.shape[0], c.q.shape[1], c.k.shape[1], c.q.shape[2],
                  c.k.shape[2], c.q.shape[3], c.v.shape[3], input=name, softmax_scale=c.softmax_scale)
             for c in layers]
    return cases, layers


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="zyfa bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="quick", help="quick (under a minute), sweep, sweep-d64|d128|d256|d192, models, "
                    "varlen, frontier, decode (with the mixed batch), mixed, window, all; comma-separated")
    ap.add_argument("--activations", help="a safetensors file from zyfa.activations.capture: bench on its layers")
    ap.add_argument("--methods", help="comma-separated labels to run (default: all), e.g. zyfa-fp8-lean_cubic,fa3-fp8")
    ap.add_argument("--out", default=os.path.join("bench", "results"), help="results folder")
    ap.add_argument("--fresh", action="store_true", help="drop records of an earlier run of the same day")
    ap.add_argument("--rounds", type=int, default=ROUNDS, help="timings a method and case, the methods taking "
                    "turns; the fastest is kept")
    ap.add_argument("--report-only", action="store_true", help="only regenerate RESULTS.md and plots (the newest run first)")
    a = ap.parse_args(argv)
    from .report import not_measured_lines, write_report
    if a.report_only:
        write_report(results_file(a.out), a.out)
        return 0
    if not torch.cuda.is_available():
        raise SystemExit("zyfa bench needs a CUDA GPU (none found); `zyfa demo` runs on the CPU")
    methods = all_methods()
    if a.methods:
        wanted = a.methods.split(",")
        unknown = set(wanted) - {m.label for m in methods}
        if unknown:
            raise SystemExit(f"unknown --methods {sorted(unknown)}; known: {[m.label for m in methods]}")
        methods = [m for m in methods if m.label in wanted]
    captured = None
    if a.activations:
        try:
            cases, captured = capture_cases(a.activations)
        except (ValueError, FileNotFoundError) as e:
            raise SystemExit(f"--activations: {e}") from e
    else:
        cases = cases_for(a.cases)
    power = Power()
    if power.nvml is None:
        print(f"energy not measured: {power.reason}")
    path = results_file(a.out)
    key = run_key()               # once: a run that goes past midnight keeps the day it started in
    doc = run(cases, methods, path, key=key, captured=captured, power=power, fresh=a.fresh, rounds=a.rounds)
    for line in not_measured_lines(doc):
        print(line)
    write_report(path, a.out, key)
    print(f"wrote {path} ({key}) and {os.path.join(a.out, 'RESULTS.md')}")
    return 0
