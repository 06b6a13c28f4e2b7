"""Tile configurations as data, a keep() filter, a committed table of tuned defaults,
and a small autotuner that runs only for keys the table does not cover.

Key: (arch, dtype, head_dim_qk, head_dim_v, causal, seqlen bucket). Every constexpr of
the kernel that is not a tile size (P rule, reference rule, per-token scales, causal)
is part of the compiled kernel's own cache key in Triton; tiles are chosen per key here.
"""
from __future__ import annotations

import dataclasses
import json
import os

import torch

from ..device import interpreter_active
from ..spec.constants import KEY_BLOCK


@dataclasses.dataclass(frozen=True)
class TileConfig:
    """A tile and how it is compiled."""
    block_m: int
    block_n: int
    num_warps: int
    num_stages: int

    @classmethod
    def parse(cls, text: str) -> "TileConfig":
        """'128,64,8,3' -> TileConfig(128, 64, 8, 3)."""
        parts = [int(x) for x in text.split(",")]
        if len(parts) != 4:
            raise ValueError(f"a tile config is 'block_m,block_n,num_warps,num_stages', got {text!r}")
        return cls(*parts)


CANDIDATES = [TileConfig(bm, bn, w, s)
              for bm in (64, 128) for bn in (64, 128) for w in (4, 8) for s in (2, 3, 4)]

# Tiles used under pytest / the CPU interpreter: small, so short sequences still span
# several key blocks and the band split is exercised.
PINNED_INTERPRETER = TileConfig(32, 32, 4, 1)

# Tuned on one H200 (bench/results/nvidia-h200.json); keys as tuning_key() builds them.
TUNED_TABLE_FILE = os.path.join(os.path.dirname(__file__), "tuned_h200.json")


def seqlen_bucket(seqlen_k: int) -> int:
    b = 1024
    while b < seqlen_k and b < 65536:
        b *= 2
    return b


def tuning_key(arch: str, is_fp8: bool, dqk: int, dv: int, causal: bool, seqlen_k: int) -> str:
    return f"{arch}|{'fp8' if is_fp8 else 'bf16'}|{dqk}|{dv}|{int(causal)}|{seqlen_bucket(seqlen_k)}"


def keep(cfg: TileConfig, dqk: int, dv: int, is_fp8: bool) -> bool:
    """Drop configs that cannot fit or make no sense for these head dims."""
    if is_fp8 and cfg.block_n != KEY_BLOCK:
        return False                       # FP8 keeps the spec's key blocks: every GPU path gives one answer
    elem = 1 if is_fp8 else 2
    smem = (cfg.block_m * dqk + cfg.num_stages * cfg.block_n * (dqk + dv)) * elem
    if smem > 200 * 1024:
        return False
    if dqk >= 192 and cfg.block_m * dv > 128 * 128 and cfg.num_warps < 8:
        return False                       # accumulator would not fit 4 warps' registers
    if cfg.block_m == 128 and cfg.num_warps == 4 and dv > 64:
        return False
    return True


def _load_table() -> dict:
    try:
        with open(TUNED_TABLE_FILE) as f:
            return {k: TileConfig(*v) for k, v in json.load(f).items()}
    except FileNotFoundError:
        return {}


_TABLE = _load_table()
_CACHE: dict[str, TileConfig] = {}


def nearest_table_entry(key: str) -> str | None:
    """A tuned entry for the same arch, dtype and head dims: same causality first, then the
    nearest seqlen bucket, so a first call on a covered GPU never autotunes."""
    arch, dtype, dqk, dv, causal, bucket = key.split("|")
    best, best_score = None, None
    for k in _TABLE:
        a, d, q, v, c, b = k.split("|")
        if (a, d, q, v) != (arch, dtype, dqk, dv):
            continue
        score = (c != causal, abs(int(b).bit_length() - int(bucket).bit_length()))
        if best_score is None or score < best_score:
            best, best_score = k, score
    return best


def choose(key: str, dqk: int, dv: int, is_fp8: bool, bench_fn=None) -> tuple[TileConfig, str]:
    """Pick a tile config and say where it came from ('pinned', 'env', 'table', 'cache', 'tuned',
    'default'). ZYFA_TRITON_AUTOTUNE=0 never tunes: a key the table does not cover takes the
    default tile (no first-call stall of seconds; the same tile in every process)."""
    env = os.environ.get("ZYFA_TRITON_CONFIG")
    if env:
        return TileConfig.parse(env), "env"
    if interpreter_active() or not torch.cuda.is_available():
        return PINNED_INTERPRETER, "pinned"
    if key in _CACHE:
        return _CACHE[key], "cache"
    if key in _TABLE:
        return _TABLE[key], "table"
    near = nearest_table_entry(key)
    if near is not None:
        return _TABLE[near], f"table ({near})"
    if bench_fn is None or os.environ.get("ZYFA_TRITON_AUTOTUNE") == "0":
        return (TileConfig(64, KEY_BLOCK, 4, 3) if is_fp8 else TileConfig(128, 64, 8, 2)), "default"
    best, best_ms = None, float("inf")
    for cfg in (c for c in CANDIDATES if keep(c, dqk, dv, is_fp8)):
        try:
            ms = bench_fn(cfg)
        except Exception:                   # e.g. out of shared memory on this GPU: skip the config
            continue
        if ms < best_ms:
            best, best_ms = cfg, ms
    if best is None:
        raise RuntimeError(f"no tile config could run for {key}")
    _CACHE[key] = best
    return best, "tuned"
