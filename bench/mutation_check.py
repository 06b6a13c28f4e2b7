"""Mutation check: does the CPU test suite notice small deliberate bugs?

Each mutation (bench/mutations.toml) is a file, an exact original text, its replacement and
the pytest selection that must fail. One at a time, the working tree (tracked and untracked, non-ignored files) is copied to
a temporary directory, the mutation is applied there (the original text must occur exactly
once), and the selection runs against the copy with a timeout. The working tree itself is
never edited. A mutation is *killed* when the selection fails, *SURVIVED* when it passes.

    python bench/mutation_check.py               # all, 2 at a time; writes notes/runs/mutations-<date>.md
    python bench/mutation_check.py -k triton -j 1
    python bench/mutation_check.py --baseline    # the selections on the unmutated tree must pass

Run on demand (minutes: each selection is a few CPU tests), not in CI.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "notes" / "runs" / f"mutations-{time.strftime('%Y-%m-%d')}.md"   # a run's record


@dataclasses.dataclass(frozen=True)
class Mutation:
    name: str
    file: str
    original: str
    replacement: str
    selection: tuple          # pytest arguments (node ids, -k expressions)


MUTATIONS = [Mutation(m["name"], m["file"], m["original"], m["replacement"], tuple(m["selection"]))
             for m in tomllib.loads((ROOT / "bench" / "mutations.toml").read_text())["mutation"]]


def _tree_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    return [f for f in out.splitlines() if (ROOT / f).is_file() and not f.startswith("bench/results/")]


def _copy_tree(dest: Path) -> None:
    for f in _tree_files():
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, dest / f)


def _pytest(tree: Path, selection, timeout: float) -> tuple[str, str]:
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *selection]
    try:
        r = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", ""
    tail = (r.stdout + r.stderr).strip().splitlines()
    failed = [ln.split(" - ")[0].removeprefix("FAILED ").removeprefix("ERROR ") for ln in tail
              if ln.startswith(("FAILED ", "ERROR "))]
    if r.returncode == 0:
        return "survived", tail[-1] if tail else ""
    if r.returncode == 1:
        return "killed", ", ".join(failed) or (tail[-1] if tail else "")
    return f"error (pytest rc {r.returncode})", tail[-1] if tail else ""


def run_one(m: Mutation, timeout: float) -> tuple[str, str, float]:
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="zyfa-mut-") as tmp:
        tree = Path(tmp)
        _copy_tree(tree)
        path = tree / m.file
        text = path.read_text()
        n = text.count(m.original)
        if n != 1:
            return f"error (original text found {n} times)", "", time.time() - t0
        path.write_text(text.replace(m.original, m.replacement))
        status, detail = _pytest(tree, m.selection, timeout)
    return status, detail, time.time() - t0


def write_report(rows, path: Path) -> None:
    killed = sum(r[1] == "killed" for r in rows)
    lines = ["# Mutation check", "",
             f"`python bench/mutation_check.py` ({time.strftime('%Y-%m-%d')}): {killed}/{len(rows)} killed. "
             "Each mutation applied alone to a copy of the tree; the selection must fail.", "",
             "| mutation | where | selection | result |", "|---|---|---|---|"]
    for m, status, detail, secs in rows:
        result = f"killed by `{detail}`" if status == "killed" else (
            "**SURVIVED**" if status == "survived" else f"**{status.upper()}** {detail}")
        sel = " ".join(m.selection).replace("|", "\\|")
        lines.append(f"| {m.name} | `{m.file}` | `{sel}` | {result} ({secs:.0f}s) |")
    path.write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-k", default="", help="only mutations whose name or file matches this regex")
    ap.add_argument("-j", type=int, default=2, help="mutations run at a time")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per selection")
    ap.add_argument("--baseline", action="store_true", help="run the selections on the unmutated tree")
    ap.add_argument("--report", default=str(REPORT))
    args = ap.parse_args(argv)
    muts = [m for m in MUTATIONS if re.search(args.k, m.name + " " + m.file)]
    if args.baseline:
        sels = sorted({s for m in muts for s in m.selection})
        with tempfile.TemporaryDirectory(prefix="zyfa-mut-") as tmp:
            _copy_tree(Path(tmp))
            status, detail = _pytest(Path(tmp), sels, args.timeout * 4)
        print("baseline:", status, detail)
        return 0 if status == "survived" else 1
    rows = []
    with concurrent.futures.ThreadPoolExecutor(args.j) as ex:
        futs = {ex.submit(run_one, m, args.timeout): m for m in muts}
        for f in concurrent.futures.as_completed(futs):
            m = futs[f]
            status, detail, secs = f.result()
            print(f"{status:>10}  {m.name}  ({secs:.0f}s) {detail}", flush=True)
            rows.append((m, status, detail, secs))
    rows.sort(key=lambda r: MUTATIONS.index(r[0]))
    write_report(rows, Path(args.report))
    print(f"{sum(r[1] == 'killed' for r in rows)}/{len(rows)} killed; report in {args.report}")
    return 0 if all(r[1] == "killed" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
