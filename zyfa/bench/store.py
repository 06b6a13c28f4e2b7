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


def latest_bench_key(entries: dict) -> str | None:
    """The newest `zyfa bench` run (an entry with records and versions, not an e2e run)."""
    keys = sorted(k for k, d in entries.items()
                  if isinstance(d, dict) and "records" in d and "versions" in d and "e2e" not in k)
    return keys[-1] if keys else None
