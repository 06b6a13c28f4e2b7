"""Where benchmark records live: one JSON file per GPU (bench/results/<gpu>.json) whose top
level maps a run's name (``<date>-<gpu>.json`` for `zyfa bench`, ``<date>-<gpu>-e2e-transformers.json``
for bench/e2e_transformers.py, older experiments by their file names) to its document."""
from __future__ import annotations

import datetime
import json
import os
import re

import torch


def gpu_name() -> str:
    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


def gpu_slug() -> str:
    return re.sub(r"[^a-z0-9]+", "-", gpu_name().lower()).strip("-")


def results_file(out_dir: str) -> str:
    return os.path.join(out_dir, f"{gpu_slug()}.json")


def run_key(kind: str = "") -> str:
    """Today's run of this GPU: runs of one day share a key, so a suite can run in parts."""
    return f"{datetime.date.today().isoformat()}-{gpu_slug()}{'-' + kind if kind else ''}.json"


def load(path: str) -> dict:
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def save_entry(path: str, key: str, doc: dict) -> None:
    """Write ``doc`` under ``key``, keeping every other entry of the file."""
    entries = load(path)
    entries[key] = doc
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(entries, f, indent=1)


def bench_run_keys(entries: dict, slug: str | None = None) -> list[str]:
    """The `zyfa bench` runs of a results file, oldest first: keys ``<date>-<gpu slug>.json``
    (run_key's form), not the records other scripts keep beside them (end-to-end runs, A/B
    sessions). ``slug``: the file's GPU (default: any)."""
    gpu = re.escape(slug) if slug else r"[a-z0-9-]+?"
    pattern = re.compile(rf"\d{{4}}-\d{{2}}-\d{{2}}-{gpu}\.json")
    return sorted(k for k, d in entries.items() if pattern.fullmatch(k) and isinstance(d, dict) and "records" in d)
