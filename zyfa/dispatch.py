"""Backends as small frozen records, and the choice among them.

`backend="auto"` takes the first registered backend that can run the call (fastest
first); an explicitly named backend that cannot run raises; ZYFA_BACKEND overrides
"auto". `zyfa.explain(...)` reports the decision and every backend's reason.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from typing import Callable

import torch

log = logging.getLogger("zyfa")


@dataclasses.dataclass(frozen=True)
class Problem:
    """What a backend needs to know to say whether it can run a call."""
    device: torch.device
    arch: str
    is_fp8: bool
    head_dims: tuple
    causal: bool
    seqlen_q: int
    seqlen_k: int
    p_rule: str
    ref_rule: str
    per_token_descales: bool = False      # q or k descales per token or per key block (FP8)
    int8_qk: bool = False                 # int8 q and k (INT8 Q.K^T, E4M3 v)
    k_descale_per_key: bool = False       # k descales per token (not per key block or coarser)
    packed: bool = False                  # a packed (varlen) batch in one launch
    window: tuple = (-1, -1)              # window_size (left, right) as validated; (-1, -1): none

    @property
    def windowed(self) -> bool:
        """A sliding window beyond the causal mask (zyfa.spec.reference.key_limits)."""
        return self.window != (-1, -1)


@dataclasses.dataclass(frozen=True)
class DecodeProblem:
    """What a decode backend (zyfa.flash_attn_with_kvcache) needs to know to say whether it can
    run a call."""
    device: torch.device
    arch: str
    is_fp8: bool                          # an E4M3 KV cache
    head_dims: tuple
    seqlen_q: int
    paged: bool


@dataclasses.dataclass(frozen=True)
class Backend:
    name: str
    can_implement: Callable[[Problem], tuple]     # -> (ok: bool, reason: str)
    run: Callable                                 # run(q, k, v, **kw) -> (out, lse)


_BACKENDS: list[Backend] = []
_LOGGED: set = set()


def register(backend: Backend) -> None:
    _BACKENDS[:] = [b for b in _BACKENDS if b.name != backend.name] + [backend]


def backends() -> list[Backend]:
    return list(_BACKENDS)


def by_name(name: str, among: list[Backend] | None = None) -> Backend:
    among = _BACKENDS if among is None else among
    for b in among:
        if b.name == name:
            return b
    raise ValueError(f"backend must be 'auto' or one of {[b.name for b in among]}, got {name!r}")


def assess(problem, among: list[Backend] | None = None) -> list[tuple[str, bool, str]]:
    return [(b.name, *b.can_implement(problem)) for b in (_BACKENDS if among is None else among)]


def select(problem, requested: str = "auto", among: list[Backend] | None = None) -> Backend:
    """The backend for ``problem`` among the registered ones (``among``: another list, the
    decode backends, whose problems are zyfa.decode.DecodeProblem)."""
    among = _BACKENDS if among is None else among
    if requested == "auto":
        env = os.environ.get("ZYFA_BACKEND", "auto")
        # a decode call stays "auto" where the variable names a prefill-only backend
        requested = env if among is _BACKENDS or any(b.name == env for b in among) else "auto"
    if requested != "auto":
        b = by_name(requested, among)
        ok, why = b.can_implement(problem)
        if not ok:
            raise RuntimeError(f"backend {requested!r} cannot run this call: {why}")
        return b
    skipped = []
    for b in among:
        ok, why = b.can_implement(problem)
        if ok:
            # once per distinct fallback, and not inside torch.compile's trace (dynamo
            # cannot trace logging)
            if skipped and not torch.compiler.is_compiling():
                note = f"zyfa: using {b.name} ({'; '.join(skipped)})"
                if note not in _LOGGED:
                    _LOGGED.add(note)
                    log.info(note)
            return b
        skipped.append(f"{b.name}: {why}")
    raise RuntimeError("no zyfa backend can run this call: " + "; ".join(skipped))
