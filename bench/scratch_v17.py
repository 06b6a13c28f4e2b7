"""Throwaway: the Triton kernel's row max on S (no multiply a score) against on t, one process."""
import json, os, sys
import torch
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from zyfa.bench.cases import model_cases  # noqa
from zyfa.bench.measure import median_ms, rel_err  # noqa
from zyfa.bench.run import case_inputs  # noqa
from zyfa.triton_kernels.launch import triton_attention  # noqa
out_dir = sys.argv[1]
rows = []
for case in [c for c in model_cases() if c.name in sys.argv[2].split(",")]:
    inp = case_inputs(case, "cuda")
    x = inp.fp8("head")
    kw8 = dict(x.kwargs(), softmax_scale=inp.scale, causal=True)
    kw16 = dict(q=inp.q, k=inp.k, v=inp.v, softmax_scale=inp.scale, causal=True)
    for label, kw in (("fp8-exact", kw8), ("bf16", kw16)):
        outs = {}
        for on_s in (False, True):
            fn = lambda kw=kw, on_s=on_s: triton_attention(**kw, _max_on_s=on_s)
            outs[on_s] = fn(); ms = median_ms(fn)
            rows.append(dict(case=case.name, label=f"triton-{label}-max_on_{'s' if on_s else 't'}", ms=ms,
                             tflops=case.flops / ms / 1e9)); print(rows[-1], flush=True)
        same = torch.equal(outs[False][0].view(torch.int16), outs[True][0].view(torch.int16)) and torch.equal(outs[False][1], outs[True][1])
        rows.append(dict(case=case.name, label=f"{label}-bit-identical", value=same, diff=rel_err(outs[True][0], outs[False][0])))
        print(rows[-1], flush=True)
    del inp; torch.cuda.empty_cache()
json.dump(dict(gpu=torch.cuda.get_device_name(), rows=rows), open(os.path.join(out_dir, "v17.json"), "w"), indent=1)
for r in rows:
    print(r)
