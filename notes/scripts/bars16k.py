"""Lab script (run 45; run 47 adds INT8 with its quantizer): issue 55's 16K bars with many rounds, medians beside the fastest.
FA3's own rounds spread up to 14% in run 43, so single fastest-round ratios decide little;
here the fast, default and INT8 modes and FA3 FP8 take turns ROUNDS times a case, in one
process. Usage: python notes/scripts/bars16k.py OUT_DIR [ROUNDS]"""
import statistics
import sys

from zyfa.bench.cases import model_cases
from zyfa.bench.run import all_methods, run
from zyfa.bench.store import results_file

out, rounds = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 7
MODES = {"fast": "zyfa-ptx-fp8-exact-running", "default": "zyfa-ptx-fp8-exact", "int8": "zyfa-ptx-int8qk",
         "int8+quantize": "zyfa-int8qk+quantize"}
cases = [c for c in model_cases() if c.name.endswith("16K")]
methods = [m for m in all_methods() if m.label in (*MODES.values(), "fa3-fp8")]
doc = run(cases, methods, results_file(out), rounds=rounds)
recs = {(r["case"], r["label"]): r for r in doc["records"] if r["status"] == "ok"}
print(f"\n{rounds} rounds; x FA3 FP8: fastest / median (FA3 rounds' spread)")
for c in cases:
    fa3 = recs.get((c.name, "fa3-fp8"))
    if fa3 is None:
        print(f"{c.name}: no FA3 record")
        continue
    line = [f"{c.name:22s} FA3 spread {max(fa3['ms_rounds']) / min(fa3['ms_rounds']) - 1:.1%}"]
    for mode, label in MODES.items():
        r = recs.get((c.name, label))
        if r:
            line.append(f"{mode} {min(fa3['ms_rounds']) / min(r['ms_rounds']):.3f} / "
                        f"{statistics.median(fa3['ms_rounds']) / statistics.median(r['ms_rounds']):.3f}")
    i8, i8q = recs.get((c.name, MODES["int8"])), recs.get((c.name, MODES["int8+quantize"]))
    if i8 and i8q:
        line.append(f"int8+quantize / int8 {min(i8['ms_rounds']) / min(i8q['ms_rounds']):.3f} / "
                    f"{statistics.median(i8['ms_rounds']) / statistics.median(i8q['ms_rounds']):.3f}")
    print(", ".join(line))
