"""Seeded random cases on the CPU paths: the reference backend, the Triton kernel in Triton's
interpreter, and the generated gfx950 kernel in zyfa's emulator.

Cases, bounds and checks live in zyfa.verify.fuzz (shared with bench/fuzz_gpu.py, which runs
the same generator on the GPU paths); its docstring states each bound, its factor and its
floor, and why. Seeds are fixed (0..N-1), so CI runs the same cases every time; a failure
prints the case and a one-line reproducer. Each test runs a chunk of cases and reports all of
its failures at once.

Each case either raises a ValueError/TypeError that names the argument (a deliberate misuse,
or a combination the path does not take) or returns an output and LSE within their bounds
against float64 attention, finite, contiguous, of the right shape and dtype.

The fuzzing found one bug (the gfx950 kernel wrote zeros to output channels 64..95 for value
dim 96); the generator now refuses value dim 96, and these cases expect the refusal.
"""
import collections

import pytest

from zyfa.device import interpreter_active
from zyfa.verify.fuzz import PATHS, draw_case, expected_refusal, run_case

CHUNK = 50
SEEDS = {"reference": 250, "triton": 200, "gfx950_emulator": 44}


def _seeds(path):
    return range(SEEDS[path])


def _chunks(path):
    n = SEEDS[path]
    return [(path, i, min(i + CHUNK, n)) for i in range(0, n, CHUNK)]


CHUNKS = [c for p in SEEDS for c in _chunks(p)]


@pytest.mark.parametrize("path,lo,hi", CHUNKS, ids=[f"{p}-{lo}-{hi}" for p, lo, hi in CHUNKS])
@pytest.mark.slow
def test_fuzz_chunk(path, lo, hi):
    if path == "triton" and not interpreter_active():
        pytest.skip("CPU tensors need Triton's interpreter; bench/fuzz_gpu.py fuzzes the Triton kernel on GPUs")
    failures, statuses = [], collections.Counter()
    for seed in range(lo, hi):
        case = draw_case(path, seed, "cpu")
        outcome = run_case(case)
        statuses[outcome.status] += 1
        if outcome.status == "fail":
            failures.append(f"{outcome}\n    repro: {case.repro()}")
    assert not failures, f"{len(failures)} of {hi - lo} cases failed ({dict(statuses)}):\n" + "\n".join(failures)
    assert statuses["ok"] >= (hi - lo) // 3, f"too few cases ran to a checked output: {dict(statuses)}"


def test_emulator_runs_enough_cases():
    """At least 20 emulator cases reach the kernel and are checked (not refused)."""
    cases = [draw_case("gfx950_emulator", s, "cpu") for s in _seeds("gfx950_emulator")]
    runnable = [c.seed for c in cases if expected_refusal(c) is None]
    assert len(runnable) >= 20, runnable


def test_draws_are_deterministic_and_cover_the_axes():
    """The same seed gives the same case; the CPU draws cover every axis the fuzzing promises."""
    assert draw_case("triton", 7, "cpu") == draw_case("triton", 7, "cpu")
    assert draw_case("triton", 7, "cpu") != draw_case("triton", 8, "cpu")
    assert set(PATHS) >= set(SEEDS)
    for path in ("reference", "triton"):
        cases = [draw_case(path, s, "cpu") for s in _seeds(path)]
        seen = collections.defaultdict(set)
        for c in cases:
            seen["dtype"].add(c.dtype)
            seen["dims"].add((c.D, c.Dv))
            seen["B"].add(c.B)
            seen["gqa"].add("mqa" if c.Hkv == 1 and c.Hq > 1 else c.Hq // c.Hkv)
            seen["causal"].add(c.causal)
            seen["kind"].add(c.input)
            seen["scale"].add(c.scale_mult is not None)
            seen["sq1"].add(c.Sq == 1)
            seen["sk>sq"].add(c.Sk > c.Sq)
            seen["invalid"].add(c.invalid)
            if c.dtype == "fp8":
                seen["granularity"].add(c.granularity)
                seen["layout"].update(c.layouts)
                seen["p_rule"].add(c.p_rule)
                seen["ref_rule"].add(c.ref_rule)
        assert seen["dtype"] == {"bf16", "fp16", "fp8"}
        assert seen["dims"] == {(64, 64), (128, 128), (256, 256), (192, 128)}
        assert {1, 2, 4, "mqa"} <= seen["gqa"] and seen["B"] == {1, 2}
        assert seen["granularity"] == {"head", "tensor", "fine", "int8"}
        assert seen["layout"] == {"scalar", "hkv", "b_hkv", "token"}
        assert len(seen["p_rule"]) == 5 and len(seen["ref_rule"]) == 3
        for axis in ("causal", "kind", "scale", "sq1", "sk>sq"):
            assert len(seen[axis]) == 2, axis
        assert len(seen["invalid"]) >= 10, seen["invalid"]
        assert sum(c.D == 64 for c in cases) > len(cases) // 2       # mostly d64, to keep it fast
        assert max(c.Sq for c in cases) >= 60
