"""`zyfa bench --cases decode` plumbing on the CPU: records, GB/s, missing anchors, paged = dense."""
import pytest

from zyfa.bench.cases import Case, cases_for
from zyfa.bench.run import all_methods
from zyfa.bench.run import run

from conftest import HAS_GPU

TINY = Case("decode", "tiny decode", 2, 1, 128, 4, 2, 64, 64)


def test_decode_cases_are_the_issue_shapes():
    shapes = {(c.B, c.Sq, c.Sk, c.Hq, c.Hkv, c.D) for c in cases_for("decode") if c.group == "decode"}
    assert shapes == {(32, 1, 8192, 32, 8, 128), (128, 1, 2048, 32, 8, 128), (8, 1, 32768, 32, 8, 128)}
    assert TINY.kv_bytes(2) == 2 * 128 * 2 * 128 * 2


@pytest.mark.skipif(HAS_GPU, reason="checks how anchors are reported on a machine without them")
@pytest.mark.slow
def test_decode_run_records_bandwidth_and_missing_anchors(tmp_path):
    methods = [m for m in all_methods() if m.decode or m.label == "zyfa-bf16"]
    doc = run([TINY], methods, str(tmp_path / "r.json"), timer=lambda fn: 1.0, rounds=1)
    recs = {r["label"]: r for r in doc["records"]}
    assert "zyfa-bf16" not in recs and "zyfa-bf16" not in doc["unavailable"]    # a prefill method: not asked
    for dtype, size in (("bf16", 2), ("fp8", 1)):
        dense, paged = recs[f"zyfa-decode-{dtype}"], recs[f"zyfa-decode-paged64-{dtype}"]
        for r in (dense, paged):
            assert r["status"] == "ok" and r["repeatable"] and r["nonfinite"] == 0, r
            assert r["group"] == "decode" and r["gbps"] == pytest.approx(TINY.kv_bytes(size) / 1e6)
            # E4M3 (FP8 dots by default): the kernel quantizes the BF16 query to E4M3, which moves
            # the scores the float64 reference takes from the BF16 query (the FP8 spec's LSE, held
            # bit for bit in tests/api/test_decode_fp8.py), not float32 rounding's
            assert r["err_kernel"] < (0.01 if dtype == "bf16" else 0.05) and r["lse_err"] < (1e-4 if dtype == "bf16"
                                                                                            else 1e-2)
        assert paged["err_e2e"] == dense["err_e2e"]          # the same keys, the same bits
    for label in ("fa3-decode-bf16", "fa3-decode-paged64-fp8", "copy-bf16"):
        assert label not in recs and doc["unavailable"][label]


@pytest.mark.skipif(HAS_GPU, reason="the CPU's records")
def test_report_takes_decode_records(tmp_path):
    from zyfa.bench.report import markdown
    methods = [m for m in all_methods() if m.label in ("zyfa-decode-bf16", "copy-bf16")]
    path = str(tmp_path / "r.json")
    assert "tiny decode" in markdown(run([TINY], methods, path, timer=lambda fn: 1.0, rounds=1), path)


@pytest.mark.skipif(HAS_GPU, reason="the CPU's records")
def test_decode_calls_are_also_timed_as_graphs(tmp_path):
    """Decode records carry the fastest graph round beside the eager one (GB/s from each); a
    call that cannot be captured keeps its eager figures and says why; the report shows both."""
    from zyfa.bench.report import markdown
    methods = [m for m in all_methods() if m.label == "zyfa-decode-bf16"]
    rounds = iter([0.5, 0.25])
    path = str(tmp_path / "r.json")
    doc = run([TINY], methods, path, timer=lambda fn: 1.0, graph_timer=lambda fn: next(rounds), rounds=2)
    (rec,) = doc["records"]
    assert rec["graph_rounds"] == [0.5, 0.25] and rec["graph_ms"] == 0.25 and rec["ms"] == 1.0
    assert rec["graph_gbps"] == pytest.approx(4 * rec["gbps"]) and rec["graph_tflops"] == pytest.approx(4 * rec["tflops"])
    text = markdown(doc, path)
    assert "GB/s as a CUDA graph" in text and f"{rec['graph_gbps']:.0f}" in text

    def uncapturable(fn):
        raise RuntimeError("operation not permitted when stream is capturing")
    (rec,) = run([TINY], methods, str(tmp_path / "s.json"), timer=lambda fn: 1.0, graph_timer=uncapturable,
                 rounds=2)["records"]
    assert rec["status"] == "ok" and rec["ms"] == 1.0 and "not permitted" in rec["graph_reason"]
    assert "graph_ms" not in rec and "graph_gbps" not in rec


def test_mixed_case_is_the_issue_batch():
    (case,) = cases_for("mixed")
    assert case.query_lengths == (1,) * 16 + (4096, 4096) and case.lengths == (8192,) * 16 + (4096, 4096)
    assert case in cases_for("decode")


@pytest.mark.skipif(HAS_GPU, reason="the CPU's records")
@pytest.mark.slow
def test_mixed_case_times_one_call_beside_separate_calls(tmp_path):
    """A mixed batch: zyfa's varlen call and the separate calls (decode kernel + prefill call)
    run and are held to float64 on the last prefill chunk's rows (fewer queries than keys:
    bottom-right causal), FLOPs the sequences' own; the decode-only and dense methods are not
    asked, the separate calls not on a plain packed case."""
    from zyfa.bench.cases import attention_flops
    mixed = Case("mixed", "tiny mixed", 4, 20, 40, 4, 2, 64, 64, lengths=(40, 33, 40, 30), q_lengths=(1, 1, 1, 20))
    plain = Case("varlen", "tiny varlen", 2, 20, 20, 4, 2, 64, 64, lengths=(7, 20))
    assert mixed.flops == sum(attention_flops(1, 4, m, n, 64, 64, True) for m, n in ((1, 40), (1, 33), (1, 40), (20, 30)))
    labels = {"zyfa-auto-varlen-bf16", "zyfa-auto-varlen-fp8", "zyfa-separate-varlen-bf16", "zyfa-separate-varlen-fp8",
              "zyfa-decode-bf16", "zyfa-bf16"}
    doc = run([mixed, plain], [m for m in all_methods() if m.label in labels], str(tmp_path / "r.json"),
              timer=lambda fn: 1.0, rounds=1)
    recs = {(r["case"], r["label"]): r for r in doc["records"]}
    assert {lab for case, lab in recs if case == "tiny mixed"} == labels - {"zyfa-decode-bf16", "zyfa-bf16"}
    assert {lab for case, lab in recs if case == "tiny varlen"} == {"zyfa-auto-varlen-bf16", "zyfa-auto-varlen-fp8"}
    for dtype, bound in (("bf16", 0.01), ("fp8", 0.08)):
        for path in ("auto", "separate"):
            r = recs[("tiny mixed", f"zyfa-{path}-varlen-{dtype}")]
            assert r["status"] == "ok" and r["repeatable"] and r["nonfinite"] == 0, r
            assert r["err_e2e"] < bound and r["err_rows"] == "last 20", r
