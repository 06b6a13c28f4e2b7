"""Backends as small frozen records, and the choice among them.

`backend="auto"` takes the first registered backend that can run the call (fastest
first); an explicitly named backend that cannot run raises; ZYFA_BACKEND overrides
"auto". `zyfa.explain(...)` reports the decision and every backend's reason. A packed
(varlen) batch runs in one launch on a backend with a packed entry (``packed_backends``), else
one call a sequence.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from typing import Callable

import torch

from .device import device_arch
from .spec.reference import NO_WINDOW
from .spec.rules import DEFAULT_P_RULE, DEFAULT_REF_RULE

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


def problem(device: torch.device, head_dims: tuple, seqlen_q: int, seqlen_k: int, *, causal: bool, is_fp8: bool,
            p_rule: str | None = None, ref_rule: str | None = None, int8_qk: bool = False,
            per_token_descales: bool = False, k_descale_per_key: bool = False, window: tuple = NO_WINDOW,
            packed: bool = False) -> Problem:
    """The one way a Problem is made (the API, varlen and the bench): the device's arch looked up
    and the rules' defaults filled in, so that a backend's answer cannot depend on who asked.
    Rules and window must already be validated (zyfa.validation)."""
    return Problem(device=device, arch=device_arch(device), is_fp8=is_fp8, head_dims=tuple(head_dims), causal=causal,
                   seqlen_q=seqlen_q, seqlen_k=seqlen_k, p_rule=DEFAULT_P_RULE if p_rule is None else p_rule,
                   ref_rule=DEFAULT_REF_RULE if ref_rule is None else ref_rule,
                   per_token_descales=per_token_descales, int8_qk=int8_qk, k_descale_per_key=k_descale_per_key,
                   packed=packed, window=window)


@dataclasses.dataclass(frozen=True)
class PackedBatch:
    """A validated packed (varlen) batch as the host knows it, what a backend's packed entry
    reads beside q, k and v: q (total_q, heads, d) and either contiguous keys, k and v
    (total_k, kv_heads, d) with each sequence's first key in ``k_starts`` (FP8 v possibly still
    a paged pool, its pages in ``v_pages``), or paged pools read in place (``block_table``)."""
    cu_seqlens_q: torch.Tensor            # the caller's int32 prefix sums of the query lengths
    q_lens: tuple                         # host ints, one a sequence
    k_lens: tuple                         # the keys each sequence uses
    k_starts: list | None = None          # contiguous keys: each sequence's first key
    v_pages: list | None = None           # FP8 v left a pool (k gathered): each sequence's pool pages
    block_table: torch.Tensor | None = None   # k and v are the caller's paged pools (run_paged)
    written_elsewhere: tuple = ()         # sequences whose rows a later launch writes (Packed's)


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
    rows: int = 1                         # a program's query rows: the GQA group times seqlen_q
    fp8_dots: bool = False                # an E4M3 cache whose dots run in FP8 (descales per sequence, kv head)
    cache_aligned: bool = True            # K's and V's base and strides multiples of 16 bytes (cp.async's copies)


@dataclasses.dataclass(frozen=True)
class Backend:
    name: str
    can_implement: Callable[[Problem], tuple]     # -> (ok: bool, reason: str)
    run: Callable                                 # run(q, k, v, **kw) -> (out, lse)
    # run_packed(q, k, v, batch: PackedBatch, **kw) -> (out, lse): a packed batch in one launch
    # (None: the batch runs one call a sequence on this backend)
    run_packed: Callable | None = None
    # run_paged(q, k, v, batch, **kw): a paged cache's pools read in place, or None where their
    # layout is not one it reads (the caller then gathers the pages for run_packed)
    run_paged: Callable | None = None


_BACKENDS: list[Backend] = []
_LOGGED: set = set()


# decode backends no prefill call has (zyfa.decode's list), for ZYFA_BACKEND's reading in select
DECODE_ONLY = frozenset({"gluon"})


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
        # a call stays "auto" where the variable names a backend of the other list only (prefill's
        # ptx for a decode call, decode's gluon for a prefill call); an unknown name still raises
        ours = any(b.name == env for b in among)
        requested = env if ours or among is _BACKENDS and env not in DECODE_ONLY else "auto"
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


def packed_backends(problem: Problem, requested: str = "auto",
                    short: bool = False) -> tuple[Backend | None, Backend | None]:
    """For a packed batch (``problem`` as for its longest sequence): the backend that runs it in
    one launch (None: one call a sequence on the chosen backend) and the one that reads a paged
    cache in place where its layout suits (None: the pages are gathered for the first). Each is
    the chosen backend where it has that entry. With "auto" and a ``short`` batch (the caller's
    measure: sequences short enough that one launch beats a faster kernel called a sequence at a
    time, docs/decisions.md) the first backend that has the entry and can run the batch stands
    in where the chosen one lacks it."""
    chosen = select(problem, requested)
    stand_in = requested == "auto" and short

    def entry(name: str) -> Backend | None:
        if getattr(chosen, name) is not None:
            return chosen
        if not stand_in:
            return None
        return next((b for b in _BACKENDS if getattr(b, name) is not None and b.can_implement(problem)[0]), None)
    return entry("run_packed"), entry("run_paged")
