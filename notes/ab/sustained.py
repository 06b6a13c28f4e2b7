"""Time and clock of the generated 16-bit kernel against FA3 BF16 over long runs. Under a
minutes-long load the H200 holds its power limit by lowering the SM clock (nvidia-smi's
event reason 0x4, the software power cap), so a kernel's time follows the energy it spends a
call, not only its cycles. Each method runs back to back for --seconds, in turns, while
nvidia-smi samples the clock and the power; per window the script prints ms a call, the mean
SM clock, the mean power and the SM cycles a call (ms x MHz).

    python notes/ab/sustained.py --out sustained.json
    python notes/ab/sustained.py --shapes "Mistral-7B 16K" --rounds 5 --seconds 6
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

FIELDS = ("timestamp", "clocks.sm", "power.draw", "temperature.gpu", "clocks_event_reasons.active")
SHAPES = {"Mistral-7B 16K": (1, 16384, 32, 8, 128, 128), "d128 32 heads 32K": (1, 32768, 32, 32, 128, 128),
          "DeepSeek-V2-Lite 16K": (1, 16384, 16, 16, 192, 128)}


def parse_sample(line: str) -> dict | None:
    """One line of nvidia-smi's csv (noheader, nounits, FIELDS) as a dict, None if it is not one."""
    p = [x.strip() for x in line.split(",")]
    if len(p) != len(FIELDS):
        return None
    try:
        t = datetime.datetime.strptime(p[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        return dict(t=t, mhz=float(p[1]), watts=float(p[2]), temp=float(p[3]), reasons=p[4])
    except ValueError:
        return None


def window_means(samples: list[dict], start: float, end: float, settle: float = 0.5) -> dict:
    """Mean clock, power and temperature of the samples taken from start + settle to end, and the
    event reasons seen there (empty when there is no sample)."""
    s = [x for x in samples if start + settle <= x["t"] <= end]
    if not s:
        return {}
    mean = lambda key: sum(x[key] for x in s) / len(s)    # noqa: E731
    return dict(samples=len(s), mhz=mean("mhz"), watts=mean("watts"), temp=mean("temp"),
                reasons=sorted({x["reasons"] for x in s}))


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _smi_query() -> list[str]:
    fields = list(FIELDS)
    probe = subprocess.run(["nvidia-smi", f"--query-gpu={fields[-1]}", "--format=csv"], capture_output=True)
    if probe.returncode:                          # drivers before the rename
        fields[-1] = "clocks_throttle_reasons.active"
    return ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits", "-lms", "50"]


def _windows(calls: dict, case: str, rounds: int, seconds: float, idle: float, use) -> list[dict]:
    """``calls``: label -> (kernel builder or None, the call); ``use`` installs a builder."""
    import torch
    out = []
    for r in range(rounds):
        for label, (build, fn) in calls.items():
            use(build)
            time.sleep(idle)
            start, n, queued = time.time(), 0, None
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            while time.time() - start < seconds:
                for _ in range(10):
                    fn()
                n += 10
                batch = torch.cuda.Event()
                batch.record()
                if queued is not None:       # wait for the batch before: ten calls stay queued, the GPU never idles
                    queued.synchronize()
                queued = batch
            e1.record()
            torch.cuda.synchronize()
            out.append(dict(case=case, label=label, round=r, start=start, end=time.time(), calls=n,
                            ms=e0.elapsed_time(e1) / n))
            print(f"{case} {label} round {r}: {out[-1]['ms']:.3f} ms", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="Mistral-7B 16K,d128 32 heads 32K", help=f"of {list(SHAPES)}")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0, help="a window's length")
    ap.add_argument("--idle", type=float, default=1.0, help="seconds idle before each window")
    ap.add_argument("--baselines", action="store_true",
                    help="also the kernels of notes/ab/ptx16_ab.py's baseline file, dense and packed")
    ap.add_argument("--methods", default=None, help="comma-separated labels to time (default: all)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    import torch

    import zyfa
    from zyfa.activations import make
    from zyfa.asm.ptx import kernels
    try:
        import fa3_fwd_interface as fa3
    except ImportError:
        fa3 = None

    from ptx16_ab import BASELINE, baseline_build, dense
    from ptx16_ab import routed as packed             # the persistent kernel past its route's reach
    own = kernels._attention_16
    bases = []
    if a.baselines:
        with open(BASELINE) as f:
            bases = [(b["commit"][:7], baseline_build(b)) for b in json.load(f)["baselines"]]

    def use(build):
        kernels._attention_16 = build or own

    log = os.path.abspath(a.out or "sustained") + ".smi.csv"
    smi = subprocess.Popen(_smi_query(), stdout=open(log, "w"))
    windows = []
    try:
        time.sleep(1.0)
        for case in a.shapes.split(","):
            B, S, Hq, Hkv, D, Dv = SHAPES[case]
            q, k, v = (t.bfloat16() for t in make("realistic", B, S, Hq, Hkv, D, head_dim_v=Dv, seed=0, device="cuda"))
            calls = {"zyfa": (None, lambda: zyfa.flash_attn_func(q, k, v, causal=True, backend="ptx")),
                     "zyfa packed": (None, lambda: packed(q, k, v))}
            for commit, build in bases:
                calls[f"{commit} dense"] = (build, lambda: dense(q, k, v))
                calls[f"{commit} packed"] = (build, lambda: packed(q, k, v))
            if fa3 is not None:
                calls["fa3"] = (None, lambda: fa3.flash_attn_func(q, k, v, causal=True))
            if a.methods:
                calls = {label: calls[label] for label in a.methods.split(",")}
            first = None
            for label, (build, fn) in calls.items():      # warm-up; zyfa's kernels agree bit for bit
                use(build)
                out = fn()
                out = out[0] if isinstance(out, tuple) else out
                if label.startswith("zyfa") or label.endswith(("dense", "packed")):
                    first = out if first is None else first
                    print(f"{case} {label}: max |out - first zyfa out| = {(out - first).abs().max().item():.1e}")
            torch.cuda.synchronize()
            windows += _windows(calls, case, a.rounds, a.seconds, a.idle, use)
            use(None)
        time.sleep(0.5)
    finally:
        smi.terminate()
        smi.wait()
    samples = [s for s in map(parse_sample, open(log)) if s is not None]
    for w in windows:
        w.update(window_means(samples, w["start"], w["end"]))
        if "mhz" in w:
            w["mcycles"] = w["ms"] * w["mhz"] / 1e3
    meta = dict(date=datetime.datetime.now().isoformat(timespec="seconds"), gpu=torch.cuda.get_device_name(),
                torch=torch.__version__, fa3=_version("fa3-fwd") if fa3 else None)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(dict(meta=meta, windows=windows), f, indent=1)
    print("| case | method | round | ms | MHz | W | Mcycles a call | event reasons |")
    print("|---|---|---|---|---|---|---|---|")
    for w in windows:
        print(f"| {w['case']} | {w['label']} | {w['round']} | {w['ms']:.3f} | {w.get('mhz', 0):.0f} | "
              f"{w.get('watts', 0):.0f} | {w.get('mcycles', 0):.3f} | {','.join(w.get('reasons', []))} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
