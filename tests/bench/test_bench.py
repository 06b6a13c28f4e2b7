"""The bench suite's plumbing on the CPU: FLOP counts, records, missing anchors, report."""
import json

import pytest
import torch

from zyfa.bench.cases import Case, attention_flops, cases_for
from zyfa.bench.run import all_methods
from zyfa.bench.report import markdown
from zyfa.bench.run import ROUNDS, capture_cases, run
from zyfa.bench.store import run_key, save_entry

from conftest import HAS_GPU, rel_err

TINY = Case("quick", "tiny", 1, 40, 40, 4, 2, 64, 64)


def test_flops_count_causal_pairs_exactly():
    # Sq = Sk: pairs = S(S+1)/2 (FlashAttention's S^2/2 plus the diagonal)
    assert attention_flops(2, 3, 4, 4, 64, 64, True) == 2 * 2 * 3 * 10 * 128
    # bottom-right: query i sees i + 1 + (Sk - Sq) keys
    assert attention_flops(1, 1, 2, 5, 64, 64, True) == 2 * (4 + 5) * 128
    assert attention_flops(1, 1, 2, 5, 64, 64, False) == 2 * 10 * 128
    with pytest.raises(ValueError, match="--cases"):
        cases_for("nonsense")


@pytest.mark.skipif(HAS_GPU, reason="checks how anchors are reported on a machine without them")
@pytest.mark.slow
def test_run_records_every_method_and_reports_missing_anchors(tmp_path):
    wanted = {"zyfa-fp8-lean_cubic", "zyfa-bf16", "zyfa-auto-fp8+quantize", "zyfa-int8qk", "zyfa-int8qk+quantize",
              "fa3-fp8", "cudnn-fp8", "sdpa_flash-bf16"}
    methods = [m for m in all_methods() if m.label in wanted]
    path = str(tmp_path / "r.json")
    doc = run([TINY], methods, path, timer=lambda fn: 1.0)
    recs = {r["label"]: r for r in doc["records"]}
    anchors = {"fa3-fp8", "cudnn-fp8", "sdpa_flash-bf16"}
    assert set(recs) == wanted - anchors and set(doc["unavailable"]) == anchors
    for label in ("zyfa-fp8-lean_cubic", "zyfa-bf16", "zyfa-auto-fp8+quantize", "zyfa-int8qk", "zyfa-int8qk+quantize"):
        r = recs[label]
        assert r["status"] == "ok", r
        assert r["tflops"] == pytest.approx(TINY.flops / 1e9)
        assert r["repeatable"] and r["nonfinite"] == 0
        assert 0 < r["err_kernel"] < 0.05
    # plumbing checks only (kernel accuracy is tested in test_triton_kernels): BF16's LSE is
    # float32-exact; FP8's sums E4M3-rounded probabilities (2^-4 per element, averaging out)
    assert recs["zyfa-bf16"]["lse_err"] < 1e-4
    assert recs["zyfa-fp8-lean_cubic"]["lse_err"] < 0.05
    assert recs["zyfa-fp8-lean_cubic"]["err_e2e"] > recs["zyfa-fp8-lean_cubic"]["err_kernel"]
    # quantize + attention in the timed call: the same quantization, so the same end-to-end error class
    plus = recs["zyfa-auto-fp8+quantize"]
    assert plus["err_e2e"] > plus["err_kernel"] and plus["err_e2e"] < 0.1
    # the INT8 mode with its quantizer in the timed call: its output, and so its errors, as without
    assert recs["zyfa-int8qk+quantize"]["err_e2e"] == recs["zyfa-int8qk"]["err_e2e"]
    assert all(doc["unavailable"][label] for label in anchors)     # each once, with its reason
    with open(path) as f:
        entries = json.load(f)
    assert list(entries) == [run_key()] and entries[run_key()]["records"] == doc["records"]
    text = markdown(doc, path)
    assert "## Not measured" in text and "fa3-fp8 (unavailable)" in text
    # a second run of the day replaces its own records and keeps the others; other runs stay
    save_entry(path, "2026-01-01-older-run.json", {"records": []})
    doc2 = run([TINY], methods[:1], path, timer=lambda fn: 2.0)
    assert len(doc2["records"]) == len(wanted - anchors) and set(doc2["unavailable"]) == anchors
    with open(path) as f:
        assert set(json.load(f)) == {run_key(), "2026-01-01-older-run.json"}


@pytest.mark.slow
def test_every_method_is_timed_before_any_reference_is_computed(tmp_path, monkeypatch):
    """A float64 reference (the heaviest work of a case) must not run between two timings."""
    from zyfa.bench.methods import Inputs
    events = []
    reference = Inputs.reference
    monkeypatch.setattr(Inputs, "reference", lambda self, quant: (events.append("reference"),
                                                                  reference(self, quant))[1])
    methods = [m for m in all_methods() if m.label in ("zyfa-bf16", "zyfa-fp8-lean_cubic")]
    doc = run([TINY], methods, str(tmp_path / "r.json"), timer=lambda fn: (events.append("time"), 1.0)[1])
    assert [r["status"] for r in doc["records"]] == ["ok", "ok"]
    first = events.index("reference")
    assert events[:first] == ["time"] * 2 * ROUNDS and set(events[first:]) == {"reference"}


@pytest.mark.slow
def test_methods_take_turns_over_the_rounds_and_keep_their_fastest(tmp_path):
    """Each round times every method once; a record keeps all rounds and the fastest."""
    times = iter([3.0, 5.0, 2.0, 6.0, 4.0, 1.0])                 # round 1: a, b; round 2: a, b; ...
    methods = [m for m in all_methods() if m.label in ("zyfa-bf16", "zyfa-fp8-lean_cubic")]
    doc = run([TINY], methods, str(tmp_path / "r.json"), timer=lambda fn: next(times), rounds=3)
    recs = {r["label"]: r for r in doc["records"]}
    first, second = (recs[m.label] for m in methods)
    assert first["ms_rounds"] == [3.0, 2.0, 4.0] and first["ms"] == 2.0
    assert second["ms_rounds"] == [5.0, 6.0, 1.0] and second["ms"] == 1.0
    assert second["tflops"] == pytest.approx(TINY.flops / 1e9)
    assert "up to 3 such medians, the methods taking turns" in markdown(doc, "r.json")


def test_host_time_a_call_is_recorded_and_reported_only_where_measured(tmp_path):
    """time_one records the host's time a call beside the GPU time (a reading whose host time
    exceeds it timed the host); the report shows that table only for records that have it."""
    from zyfa.bench.run import case_inputs, time_one
    m = next(m for m in all_methods() if m.label == "zyfa-bf16")
    inp = case_inputs(TINY, "cuda" if HAS_GPU else "cpu")    # where the Triton kernel runs
    calls = []
    rec, _ = time_one(inp, m, timer=lambda fn: 1.0, host_timer=lambda fn: (calls.append(fn()), 0.25)[1])
    assert rec["status"] == "ok" and rec["host_us"] == 250.0 and len(calls) == 1
    assert "host_us" not in time_one(inp, m, timer=lambda fn: 1.0)[0]
    doc = {"records": [dict(rec, group="quick")]}
    assert "### host time a call" in markdown(doc, "r.json")
    del doc["records"][0]["host_us"]
    assert "host time a call" not in markdown(doc, "r.json")


def test_bench_on_captured_activations(tmp_path):
    transformers = pytest.importorskip("transformers")
    from zyfa.activations import capture
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=128, intermediate_size=128, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, head_dim=64)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    path = str(tmp_path / "tiny.safetensors")
    capture(model, torch.randint(0, 64, (1, 24)), path=path)
    cases, layers = capture_cases(path)
    assert [(c.name, c.Hq, c.Hkv, c.D) for c in cases] == [("tiny:layer0", 2, 1, 64)]
    assert cases[0].softmax_scale == pytest.approx(64 ** -0.5)
    bf16 = [m for m in all_methods() if m.label == "zyfa-bf16"]
    doc = run(cases, bf16, str(tmp_path / "c.json"), captured=layers, timer=lambda fn: 1.0)
    (r,) = doc["records"]
    assert r["status"] == "ok" and r["input"] == "tiny" and r["err_e2e"] < 1e-2


@pytest.mark.skipif(HAS_GPU, reason="checks the plumbing on a machine without the anchors")
@pytest.mark.slow
def test_varlen_case_measures_the_last_sequence_against_its_own_keys(tmp_path):
    """A packed case: the varlen methods run, the dense ones are not asked, FLOPs are the
    sequences' own, and the error (last sequence's rows against float64 over its own keys)
    is that of a dense call on that sequence alone."""
    import zyfa
    from zyfa.bench.methods import Inputs
    from zyfa.bench.run import case_inputs
    case = Case("varlen", "tiny varlen", 3, 40, 40, 4, 2, 64, 64, lengths=(7, 19, 40))
    assert case.flops == sum(attention_flops(1, 4, n, n, 64, 64, True) for n in (7, 19, 40))
    wanted = {"zyfa-auto-varlen-bf16", "zyfa-auto-varlen-fp8", "zyfa-bf16", "fa3-varlen-bf16",
              "zyfa-auto-varlen-paged64-bf16", "zyfa-auto-varlen-paged128-fp8", "zyfa-auto-varlen-fp8-exact-running"}
    methods = [m for m in all_methods() if m.label in wanted]
    doc = run([case], methods, str(tmp_path / "r.json"), timer=lambda fn: 1.0)
    recs = {r["label"]: r for r in doc["records"]}
    assert "zyfa-bf16" not in recs                       # a dense method: not asked on a packed case
    assert "fa3-varlen-bf16" in doc["unavailable"] and "fa3-varlen-bf16" not in recs
    for label in ("zyfa-auto-varlen-bf16", "zyfa-auto-varlen-fp8", "zyfa-auto-varlen-paged64-bf16",
                  "zyfa-auto-varlen-paged128-fp8", "zyfa-auto-varlen-fp8-exact-running"):
        assert recs[label]["status"] == "ok" and recs[label]["repeatable"], recs[label]
    for dtype, page in (("bf16", 64), ("fp8", 128)):     # a paged cache gives the contiguous batch's bits
        assert recs[f"zyfa-auto-varlen-paged{page}-{dtype}"]["err_e2e"] == recs[f"zyfa-auto-varlen-{dtype}"]["err_e2e"]
    inp = case_inputs(case, "cpu")
    assert isinstance(inp, Inputs) and inp.q.shape == (1, 66, 4, 64)
    last = slice(26, 66)
    dense = zyfa.flash_attn_func(inp.q[:, last], inp.k[:, last], inp.v[:, last], causal=True)
    ref, _ = inp.reference(None)
    assert recs["zyfa-auto-varlen-bf16"]["err_e2e"] == pytest.approx(rel_err(dense, ref), rel=1e-6)


@pytest.mark.slow
def test_e2e_trained_mode_trains_and_records(tmp_path):
    """bench/e2e_transformers.py --trained on the CPU, tiny: the decoder's loss falls on the
    standard library's bytes, and the record says the model is trained, with a KL for each
    backend that ran."""
    pytest.importorskip("transformers")
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "bench/e2e_transformers.py", "--trained", "--train-steps", "30",
                        "--train-seqlen", "64", "--train-batch", "4", "--layers", "1", "--seqlen", "96",
                        "--reps", "1", "--impls", "fp32_ref,sdpa,zyfa_fp8", "--out", str(tmp_path),
                        "--decode-steps", "8"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    losses = [float(line.split("train loss ")[1].split()[0]) for line in r.stdout.splitlines() if "train loss" in line]
    doc = next(iter(json.loads(next(tmp_path.glob("*.json")).read_text()).values()))
    assert "trained" in doc["model"]
    final = float(doc["model"].split("final train loss ")[1].split()[0])
    assert final < losses[0] - 1.0, (losses, final)          # from ~ln 256 = 5.5 nats a byte
    kl = {row["attn_implementation"]: row.get("kl_vs_fp32_attention") for row in doc["records"]}
    assert kl["fp32_ref"] == 0 and kl["sdpa"] > 0 and kl["zyfa_fp8"] > 0
    # decoding the last 8 bytes with an E4M3 cache moves the distributions a little, on zyfa throughout
    dec = doc["decode"]
    assert dec["decode_steps"] == 8 and 0 < dec["kl_e4m3_vs_bf16_cache"] < 0.05, dec
    assert dec["argmax_agreement_e4m3_vs_bf16_cache"] > 0.5 and dec["sdpa_fallbacks_logged"] == 0, dec


def test_bench_lists_only_what_it_could_have_run(tmp_path):
    """`zyfa bench --cases quick` (dense cases) with every method: the varlen and decode methods
    are not asked (no record, not under "Not measured", not even as unavailable), a method that
    cannot run on this machine is listed once as unavailable whatever the number of cases, and a
    method refused a
    case it takes is listed with that case. The methods' calls are stubbed: the listing is the
    run's and the report's logic, not the kernels'."""
    import dataclasses
    from zyfa.bench.report import not_measured_lines
    stub = lambda inp: (lambda: (inp.q, None))            # noqa: E731  (an output of the right shape)
    nowhere = Case("quick", "tiny window", 1, 40, 40, 4, 2, 64, 64, window=(8, 0))
    methods = [dataclasses.replace(m, build=stub) for m in all_methods()]
    methods.append(dataclasses.replace(methods[0], method="nowindow", missing=lambda: None, build=stub,
                                       unsupported=lambda case: "no window" if case.window != (-1, -1) else None))
    methods.append(dataclasses.replace(methods[0], method="absent", missing=lambda: "not installed", build=stub))
    doc = run([TINY, nowhere], methods, str(tmp_path / "r.json"), timer=lambda fn: 1.0, rounds=1)
    labels = {r["label"] for r in doc["records"]}
    kinds = [m for m in methods if m.varlen or m.decode]
    assert len([m for m in kinds if m.varlen]) == 11 and not labels & {m.label for m in kinds}   # 2 mixed-only, 1 fast mode
    missing = {m.label for m in methods if m.missing() and m not in kinds}
    assert "absent-fp8-exact" in missing and set(doc["unavailable"]) == missing and not labels & missing
    lines = not_measured_lines(doc)
    assert not any("varlen" in line or "decode" in line for line in lines), lines
    for label in missing:                                  # once each, no cases named
        assert [line for line in lines if line.startswith(f"NOT MEASURED {label} (")] == \
            [f"NOT MEASURED {label} (unavailable): {doc['unavailable'][label]}"]
    assert "NOT MEASURED nowindow-fp8-exact (unsupported on tiny window): no window" in lines
    assert all(r["status"] == "ok" for r in doc["records"] if r["case"] == "tiny"), \
        [r for r in doc["records"] if r["status"] != "ok"]
    text = markdown(doc, "r.json")
    assert "* absent-fp8-exact (unavailable): not installed" in text and "varlen" not in text


def test_report_shows_the_bench_runs_not_the_other_records(tmp_path):
    """RESULTS.md: the newest `zyfa bench` run first, then the earlier ones; records other
    scripts keep in the same file (A/B sessions, end-to-end runs) are not taken for a run."""
    from zyfa.bench.report import write_report
    from zyfa.bench.store import bench_run_keys
    rec = dict(gpu="G", date="d", case="c", group="quick", label="m", status="ok", tflops=1.0, err_kernel=None,
               err_e2e=None, tflop_per_j=None, sm_clock_mhz=None)
    entries = {"2026-01-02-g-x.json": dict(records=[{**rec, "tflops": 2.0}], versions={}),
               "2026-01-01-g-x.json": dict(records=[rec], versions={}),
               "2026-01-03-g-x-redesign-ab.json": dict(records=[{**rec, "tflops": 3.0}], versions={})}
    path = tmp_path / "g-x.json"
    path.write_text(json.dumps(entries))
    assert bench_run_keys(entries, "g-x") == ["2026-01-01-g-x.json", "2026-01-02-g-x.json"]
    text = open(write_report(str(path), str(tmp_path))).read()
    first, earlier = text.split("# Earlier run: 2026-01-01-g-x.json")
    assert "2026-01-02-g-x.json" in first and "| c | 2 |" in first and "| c | 1 |" in earlier
    assert "| c | 3 |" not in text


def test_e2e_table_shows_kernel_times_only_for_a_profiled_run():
    """report.e2e_markdown: the GPU-kernel column (bench/e2e_transformers.py on a GPU) only when
    the run recorded it; a failed backend keeps the table's width."""
    from zyfa.bench.report import e2e_markdown
    doc = dict(model="m", seqlen=8, gpu="g", date="d", versions={}, turns=True, records=[
        dict(attn_implementation="sdpa", status="ok", seconds_median=0.5, seconds_all=[0.5, 0.6, 0.4],
             kernel_seconds=0.45, kl_vs_fp32_attention=1e-3, argmax_agreement=0.9),
        dict(attn_implementation="x", status="failed", reason="no")])
    rows = [line for line in e2e_markdown(doc, "src").splitlines() if line.startswith("|")]
    assert "GPU kernels" in rows[0] and "| 0.500 | 0.450 |" in rows[2] and "median of 3, the backends in turns" in \
        e2e_markdown(doc, "src")
    assert len({line.count("|") for line in rows}) == 1
    for r in doc["records"]:
        r.pop("kernel_seconds", None)
    doc.pop("turns")
    text = e2e_markdown(doc, "src")
    rows = [line for line in text.splitlines() if line.startswith("|")]
    assert "GPU kernels" not in text and "in turns" not in text and len({line.count("|") for line in rows}) == 1


def test_trace_probes_stamp_each_wait_once_and_cut_stamps_into_tiles():
    """bench/trace_ptx.py: the instrumented d256 packed kernel assembles without spills, each
    of the consumers' mbarrier waits gets one stamp on entry (before its spin loop, not inside
    it) and one on exit, the producer's none; a consumer's stamps become per-tile Q waits,
    block times by index, K / V waits and tails."""
    import sys
    sys.path.insert(0, "bench")
    from trace_ptx import instrument, summarize, tiles_of

    from zyfa.asm.ptx import attention as attn
    from zyfa.asm.ptx.assemble import assemble
    _, ptx = attn.attention_kernel_16("bf16", True, 256, 256, "sm_90a", True)
    traced, names = instrument(ptx, 1 << 40, 64)
    assert assemble(traced).spill_bytes == 0
    consumers = ptx[:ptx.index("\nPRODUCER:")]
    waits = {line.strip()[:-1] for line in consumers.splitlines()
             if line.strip().startswith("WAIT_") and line.endswith(":")}
    assert waits and sorted(n for n in names if n.split()[-1] in waits) == sorted(
        f"{side} {w}" for w in waits for side in ("enter", "exit"))
    assert "PRODUCER" not in names and not {n.split()[-1] for n in names} & {"WAIT_FREE", "WAIT_V_FREE", "LOAD_LOOP"}
    producer = traced[traced.index("\nPRODUCER:"):]
    assert "%clock" not in producer
    lines = traced.splitlines()
    for w in waits:                                       # nothing stamped between a spin loop's head and its branch
        head = lines.index(f"{w}:")
        assert "%clock" not in lines[head + 1] and lines[head + 2].strip().endswith(f"bra {w};")
    stamps = [(0, "enter WAIT_Q"), (50, "exit WAIT_Q"), (90, "BLOCK_BODY_BELOW"), (95, "enter WAIT_KV_BELOW"),
              (105, "exit WAIT_KV_BELOW"), (190, "BLOCK_BODY"), (300, "LAST_PV"), (320, "enter WAIT_V_LAST"),
              (330, "exit WAIT_V_LAST"), (400, "enter WAIT_Q_NEXT"), (420, "exit WAIT_Q_NEXT"),
              (500, "LAST_PV"), (600, "enter WAIT_Q_NEXT")]
    first, second = tiles_of(stamps)
    assert (first["q_wait"], first["last_v_wait"], first["tail"], second["tail"]) == (50, 10, 100, 100)
    (only,) = tiles_of(stamps[:9])                        # a dense CTA's one tile: no Q wait after it
    assert only["tail"] is None and len(only["blocks"]) == 3 and only["last_v_wait"] == 10
    assert [(b["start"], b["below"], b["k_wait"]) for b in first["blocks"]] == [(50, False, 0), (90, True, 10),
                                                                              (190, False, 0)]
    s = summarize({4: stamps, 8: [(c + 7, n) for c, n in stamps]}, 12, 2)
    assert s["tiles"] == 4 and s["per_tile"]["q_wait"] == 35.0 and s["consumer_offset"] == 7.0
    assert s["lag_by_block_index"] == {"0": 7.0, "1": 7.0, "2": 7.0}
    assert {i: (b["cycles"], b["k_wait"], b["n"]) for i, b in s["by_block_index"].items()} == {
        "0": (60.0, 0.0, 4), "1": (100.0, 10.0, 2), "2": (110.0, 0.0, 2)}
    assert names[:2] == ["smid", "start"] and traced.count("%smid") == 1


def test_trace_decodes_sm_and_gaps_between_ctas():
    """bench/trace_ptx.py: each warp's first stamp holds its SM, the rest become cycles since
    its start; the gaps between consecutive CTAs on one SM (by their first consumer warp)
    come out of the raw 32-bit clocks, across the clock's wrap."""
    import sys

    import torch
    sys.path.insert(0, "bench")
    from trace_ptx import decode, sm_gaps
    names = ["smid", "start", "BLOCK_BODY", "CONSUMER_DONE"]
    words = torch.full((36, 4, 2), -1, dtype=torch.int32)
    wrap = (1 << 32) - 100                                # CTA 1 starts just before the clock wraps

    def cta(index, sm, start, end):
        g = index * 12 + 4                                # the first consumer's first warp
        for slot, (clk, event) in enumerate([(sm, 0), (start, 1), (start + 30, 2), (end, 3)]):
            words[g, slot] = torch.tensor([clk - (1 << 32) if clk >= 1 << 31 else clk, event])
    cta(0, 3, wrap - 1000, wrap - 200)
    cta(1, 3, wrap, (wrap + 500) % (1 << 32))
    cta(2, 5, 7, 900)
    warps, spans = decode(words, names)
    assert warps[4] == [(0, "start"), (30, "BLOCK_BODY"), (800, "CONSUMER_DONE")]
    assert warps[16][-1] == (500, "CONSUMER_DONE") and spans[28] == (5, 7, 900)
    g = sm_gaps(spans, 12)
    assert (g["sms"], g["ctas_per_sm"], g["gap_mean"], g["gap_median"]) == (2, 1.5, 200, 200)
    assert g["gap_share"] == 200 / (1500 + 893) and g["busy_share"] == (800 + 500 + 893) / (1500 + 893)


def test_frontier_cases_and_plot(tmp_path):
    """--cases frontier: the realistic model shapes plus d64 and d256 at 8K; its records get a
    plot of end-to-end error against TFLOP/s, a panel a case, and no bar in the error chart."""
    pytest.importorskip("matplotlib")
    from zyfa.bench.report import plots
    cases = cases_for("frontier")
    assert {c.group for c in cases} == {"frontier"} and all(c.input == "realistic" for c in cases)
    assert {(c.D, c.Dv) for c in cases} == {(64, 64), (128, 128), (192, 128), (256, 256)}
    recs = [dict(status="ok", group="frontier", case=c.name, label=label, tflops=t, err_e2e=e, err_kernel=e,
                 Dqk=c.D, Dv=c.Dv, Sq=c.Sq)
            for c in cases[:2] for label, t, e in (("fa3-fp8", 900.0, 3e-2), ("zyfa-ptx-fp8-exact-running", 910.0, 3e-2))]
    written = plots({"records": recs}, str(tmp_path / "gpu"))
    assert written == [str(tmp_path / "gpu-frontier.png")]
    assert (tmp_path / "gpu-frontier.png").stat().st_size > 1000


def test_a_run_past_midnight_reports_the_day_it_recorded(tmp_path, monkeypatch):
    # `zyfa bench` records under the day it started and its report must read that entry, even
    # when the clock passes midnight during the cases (a KeyError at the report before)
    import zyfa.bench.report as report
    import zyfa.bench.run as bench_run
    days = iter(f"2026-12-0{d}-g.json" for d in range(7, 10))
    monkeypatch.setattr(bench_run, "run_key", lambda: next(days))
    monkeypatch.setattr(bench_run.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(bench_run, "results_file", lambda out: str(tmp_path / "g.json"))
    seen = {}
    monkeypatch.setattr(bench_run, "run", lambda *a, key=None, **k: seen.update(recorded=key) or {"records": []})
    monkeypatch.setattr(report, "write_report", lambda path, out, key=None: seen.update(reported=key))
    assert bench_run.main(["--cases", "quick", "--out", str(tmp_path)]) == 0
    assert seen == {"recorded": "2026-12-07-g.json", "reported": "2026-12-07-g.json"}
