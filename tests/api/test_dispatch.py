"""The dispatcher (zyfa.dispatch): the automatic choice, its fallback log, a requested backend
that cannot run, ZYFA_BACKEND."""
import logging

import pytest

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
