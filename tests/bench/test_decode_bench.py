"""`zyfa bench --cases decode` plumbing on the CPU: records, GB/s, missing anchors, paged = dense."""
import pytest

from zyfa.bench.cases import Case, cases_for
from zyfa.bench.methods import all_methods
from zyfa.bench.run import run

from conftest import HAS_GPU

TINY = Case("decode", "tiny decode", 2, 1, 128, 4, 2, 64, 64)


def test_decode_cases_are_the_issue_shapes():
    shapes = {(c.B, c.Sq, c.Sk, c.Hq, c.Hkv, c.D) for c in cases_for("decode")}
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
