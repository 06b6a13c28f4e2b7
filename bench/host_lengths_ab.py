"""Branch varlen-host-lengths, to delete once measured: zyfa's varlen call with the index
tensors on the GPU (a synchronization a call) and on the CPU (none), zyfa bench's varlen case
and a short batch, beside FA3's varlen in the same process."""
import dataclasses, json, random, sys
import torch
import zyfa
from zyfa.bench.cases import varlen_cases
from zyfa.bench.run import case_inputs
from zyfa.bench.measure import median_ms
import fa3_fwd_interface as fa3

rows = []
case = varlen_cases()[0]
rng = random.Random(0)
batches = {"bench varlen 16 seqs": list(case.lengths), "32 x 64..2048": [rng.randint(64, 2048) for _ in range(32)]}
for name, lens in batches.items():
    inp = case_inputs(dataclasses.replace(case, lengths=tuple(lens), B=len(lens), Sq=max(lens), Sk=max(lens)), "cuda")
    q, k, v = inp.q[0], inp.k[0], inp.v[0]
    n, mx = len(lens), max(lens)
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
    x = zyfa.quantize_fp8(q[None], k[None], v[None])
    ds = {f"{t}_descale": getattr(x, f"{t}_descale").expand(n, -1).contiguous() for t in "qkv"}
    flops = sum(2 * 32 * (m * (m + 1) // 2) * 2 * 128 for m in lens)
    v8 = x.v[0].contiguous()
    line = [f"{name:22s}"]
    for label, fn in {
        "zyfa fp8 gpu cu": lambda: zyfa.flash_attn_varlen_func(x.q[0], x.k[0], x.v[0], cu, cu, mx, mx, **ds),
        "zyfa fp8 cpu cu": lambda c=cu.cpu(): zyfa.flash_attn_varlen_func(x.q[0], x.k[0], x.v[0], c, c, mx, mx, **ds),
        "fa3 fp8": lambda: fa3.flash_attn_varlen_func(x.q[0], x.k[0], v8, cu, cu, mx, mx, causal=True, **ds),
        "zyfa bf16 gpu cu": lambda: zyfa.flash_attn_varlen_func(q, k, v, cu, cu, mx, mx),
        "zyfa bf16 cpu cu": lambda c=cu.cpu(): zyfa.flash_attn_varlen_func(q, k, v, c, c, mx, mx),
        "fa3 bf16": lambda: fa3.flash_attn_varlen_func(q, k, v, cu, cu, mx, mx, causal=True),
    }.items():
        fn()
        tf = flops / median_ms(fn) / 1e9
        rows.append(dict(batch=name, label=label, tflops=tf))
        line.append(f"{label} {tf:.0f}")
    print(" | ".join(line), flush=True)
json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), open(sys.argv[1], "w"), indent=1)
