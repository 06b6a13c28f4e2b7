"""The dispatcher (zyfa.dispatch): the automatic choice, its fallback log, a requested backend
that cannot run, ZYFA_BACKEND; packed batches: which backend runs one in one launch, which
reads a paged cache in place."""
import dataclasses
import logging

import pytest
import torch

import zyfa
from zyfa import dispatch
from zyfa.activations import make

from conftest import DEVICE


def _fp8_call():
    """Small FP8 inputs with the block_pow2 reference, which the generated Hopper kernels refuse:
    the automatic choice always skips at least one backend here."""
    q, k, v = make("gaussian", 1, 40, 2, 1, 64, device=DEVICE, seed=3)
    return dict(**zyfa.quantize_fp8(q, k, v).kwargs(), causal=True, ref_rule="block_pow2")


def _notes(caplog):
    return [r.message for r in caplog.records if r.message.startswith("zyfa: using")]


def test_a_fallback_is_logged_once_naming_what_was_skipped_and_why(caplog):
    kw = _fp8_call()
    chosen = zyfa.explain(**kw).split()[1].rstrip(":")
    dispatch._LOGGED.clear()
    with caplog.at_level(logging.INFO, logger="zyfa"):
        for _ in range(3):
            zyfa.flash_attn_func(**kw)
    notes = _notes(caplog)
    assert len(notes) == 1, notes
    assert notes[0].startswith(f"zyfa: using {chosen} (") and "ptx: " in notes[0], notes


def test_the_first_backend_that_can_run_logs_nothing(caplog):
    dispatch._LOGGED.clear()
    kw = _fp8_call()
    first = next(b.name for b in dispatch._BACKENDS)
    with caplog.at_level(logging.INFO, logger="zyfa"):
        zyfa.flash_attn_func(**kw, backend="reference")        # named: no choice, no note
    assert _notes(caplog) == [] and first == "ptx"


def test_a_requested_backend_that_cannot_run_raises_with_its_reason():
    with pytest.raises(RuntimeError, match=r"backend 'ptx' cannot run this call: .+"):
        zyfa.flash_attn_func(**_fp8_call(), backend="ptx")
    with pytest.raises(ValueError, match="backend must be"):
        zyfa.flash_attn_func(**_fp8_call(), backend="nope")


def test_zyfa_backend_variable_selects_like_the_argument(monkeypatch):
    kw = _fp8_call()
    monkeypatch.setenv("ZYFA_BACKEND", "reference")
    assert zyfa.explain(**kw).startswith("selected: reference")
    a = zyfa.flash_attn_func(**kw)
    monkeypatch.delenv("ZYFA_BACKEND")
    b = zyfa.flash_attn_func(**kw, backend="reference")
    assert a.equal(b)


# ------------------------------------------------------------------ packed (varlen) problems
def _packed_problem(**kw):
    base = dict(device=torch.device(DEVICE), head_dims=(64, 64), seqlen_q=40, seqlen_k=40, causal=True,
                is_fp8=False, packed=True)
    return dispatch.problem(**{**base, **kw})


def _choosing(monkeypatch, name):
    """dispatch.select answers ``name`` (a registered backend) for every problem, as it would on
    that backend's hardware; the packed entries are then the registered records'. gfx950: the
    generated Hopper kernel cannot run there (on a Hopper test machine it could stand in)."""
    chosen = dispatch.by_name(name)
    monkeypatch.setattr(dispatch, "select", lambda problem, requested="auto": chosen)
    if name == "gfx950":
        monkeypatch.setattr(dispatch, "_BACKENDS", [dataclasses.replace(b, can_implement=lambda p: (False, "AMD"))
                                                    if b.name == "ptx" else b for b in dispatch.backends()])


def test_packed_entries_are_the_kernels_that_take_a_batch_in_one_launch():
    """The generated Hopper kernel and the Triton kernel run a packed batch in one launch, only
    the Triton kernel reads a paged cache in place; gfx950 and the reference run a call a sequence."""
    entries = {b.name: (b.run_packed is not None, b.run_paged is not None) for b in dispatch.backends()}
    assert entries == {"ptx": (True, False), "gfx950": (False, False), "triton": (True, True),
                       "reference": (False, False)}


@pytest.mark.parametrize("short", [False, True])
def test_a_packed_entry_of_the_chosen_backend_runs_the_batch(short):
    """Named, the backend's own entries, short batch or not; a backend without one: a call a sequence."""
    p = _packed_problem()
    triton = dispatch.by_name("triton")
    assert dispatch.packed_backends(p, "triton", short) == (triton, triton)
    assert dispatch.packed_backends(p, "reference", short) == (None, None)


@pytest.mark.parametrize("chosen, short, want", [
    ("ptx", False, ("ptx", None)),               # gathered pages for the generated kernel
    ("ptx", True, ("ptx", "triton")),            # short: the Triton kernel reads pages in place first
    ("gfx950", False, (None, None)),             # a call a sequence on gfx950
    ("gfx950", True, ("triton", "triton")),      # short: one Triton launch instead
    ("triton", False, ("triton", "triton")),
    ("reference", True, (None, None)),           # auto chose the reference: nothing else can run it
])
def test_auto_takes_a_stand_in_for_short_batches_only(monkeypatch, chosen, short, want):
    """With "auto" and sequences short on average, the first backend with the entry that can run
    the batch stands in for a chosen backend without it (SHORT_MEAN_QUERIES, docs/decisions.md)."""
    _choosing(monkeypatch, chosen)
    p = _packed_problem()                        # the Triton interpreter (or the GPU) can run it
    if chosen == "reference":
        monkeypatch.setattr(dispatch, "_BACKENDS", [b for b in dispatch.backends() if b.name == "reference"])
    one, reader = dispatch.packed_backends(p, "auto", short)
    assert (one and one.name, reader and reader.name) == want


def test_a_named_backend_gets_no_stand_in(monkeypatch):
    _choosing(monkeypatch, "gfx950")
    assert dispatch.packed_backends(_packed_problem(), "gfx950", short=True) == (None, None)


def test_a_stand_in_must_be_able_to_run_the_batch(monkeypatch):
    """The Triton kernel stands in only where it can run the problem (here it is told it cannot)."""
    _choosing(monkeypatch, "gfx950")
    monkeypatch.setattr(dispatch, "_BACKENDS", [dataclasses.replace(b, can_implement=lambda p: (False, "no"))
                                                if b.name == "triton" else b for b in dispatch.backends()])
    assert dispatch.packed_backends(_packed_problem(), "auto", short=True) == (None, None)


def test_varlen_asks_the_dispatcher_with_the_longest_sequence_as_a_packed_problem(monkeypatch):
    """flash_attn_varlen_func's Problem: packed, the longest query and key counts, the rules
    defaulted, the window validated; the dispatcher's answer runs the batch."""
    seen = []
    real = dispatch.packed_backends
    monkeypatch.setattr(dispatch, "packed_backends", lambda p, b, short: seen.append((p, b, short)) or real(p, b, short))
    lens_q, lens_k = [3, 7], [5, 9]
    q = torch.randn(sum(lens_q), 2, 64).bfloat16().to(DEVICE)
    k, v = (torch.randn(sum(lens_k), 1, 64).bfloat16().to(DEVICE) for _ in range(2))
    cu = lambda lens: torch.tensor([0, lens[0], sum(lens)], dtype=torch.int32, device=DEVICE)   # noqa: E731
    zyfa.flash_attn_varlen_func(q, k, v, cu(lens_q), cu(lens_k), causal=True, window_size=(4, 0), backend="triton")
    (p, requested, short), = seen
    assert p == dispatch.problem(q.device, (64, 64), 7, 9, causal=True, is_fp8=False,
                                 window=(4, -1), packed=True)
    assert requested == "triton" and short


def test_the_api_and_the_builder_make_the_same_problem(monkeypatch):
    """flash_attn_func's Problem is dispatch.problem's: per-token descales and k descales a key
    block read from the tensors' shapes."""
    seen = []
    real = dispatch.select
    monkeypatch.setattr(dispatch, "select", lambda p, requested="auto": seen.append(p) or real(p, requested))
    kw = _fp8_call()
    zyfa.flash_attn_func(**kw)
    assert seen[-1] == dispatch.problem(kw["q"].device, (64, 64), 40, 40, causal=True, is_fp8=True,
                                        ref_rule="block_pow2", window=(-1, -1))
