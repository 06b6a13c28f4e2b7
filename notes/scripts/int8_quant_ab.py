"""Lab A/B (not for the package), run 46: the INT8 quantizer's two launches under other tilings and
warp counts, every variant's bytes equal to the package's (a code depends on its row's or key
block's amax and its own row's rotation only, so tiles and warps are free). Run 45 found no part
near the copy's rate, and the codes launch holds 168 registers a thread (V^T's 32 x 128 tiles;
q's and k's paths alone 128-138 on sm_90a): three 4-warp programs an SM. Variants of the codes
launch: the package, Dqk 192 as a 128- and a 64-column tile (SPLIT, a file: `git show
23b1946:zyfa/triton_kernels/quantize_int8.py`, kept off main until a GPU has run it), 8 warps,
V^T in 16-token tiles, q's and k's tiles of 1,024 elements, both; of the sums launch: 8 warps, tiles half as tall,
both (ptxas: 128 registers at 4 warps, 74 at 8, 78 with half-height tiles). DeepSeek-V2-Lite 16K and Mistral-7B 16K, do_bench medians (L2 cleared), 3 rounds in turns.

    python notes/scripts/int8_quant_ab.py [SPLIT]
"""
import importlib.util
import sys

import torch
import triton

from zyfa.activations import make
from zyfa.triton_kernels import quantize as fused_quantize, quantize_int8


class Captured:
    """Stands in for a kernel during one call and keeps the launch asked of it."""
    def __init__(self, kernel):
        self.kernel, self.grid, self.args, self.kw = kernel, None, None, None

    def __getitem__(self, grid):
        def keep(*args, **kw):
            self.grid, self.args, self.kw = grid, list(args), dict(kw)
        return keep


def capture(module, name, call):
    """The launch of ``module.name`` that ``call()`` makes (not run)."""
    cap = Captured(getattr(module, name))
    setattr(module, name, cap)
    try:
        call()
    finally:
        setattr(module, name, cap.kernel)
    return cap


def codes_launch(cap, warps=4, bs_div=1, bs_v=None):
    """The captured codes launch again, q's and k's tiles 1 / bs_div as tall, V^T's bs_v tall."""
    names = cap.kernel.arg_names
    args, kw = list(cap.args), dict(cap.kw)
    at = {n: names.index(n) for n in ("Sq", "S_OUT_V", "KEY_BLOCK", "NTQ", "NTK", "NTV")}
    if bs_div > 1:
        kw["BS"] = kw["BS"] // bs_div
        kw["NSUB_K"] = triton.cdiv(args[at["KEY_BLOCK"]], kw["BS"])
        args[at["NTQ"]] = triton.cdiv(args[at["Sq"]], kw["BS"])
    if bs_v:
        kw["BS_V"] = bs_v
        args[at["NTV"]] = triton.cdiv(args[at["S_OUT_V"]], bs_v)
    grid = (cap.grid[0], max(args[at["NTQ"]], args[at["NTK"]], args[at["NTV"]]), 3)
    return lambda: cap.kernel[grid](*args, num_warps=warps, **kw)


def sums_launch(cap, warps=4, rows_div=1):
    """The captured sums launch again, its k tiles 1 / rows_div as tall (each chunk the same keys)."""
    names = cap.kernel.arg_names
    args, kw = list(cap.args), dict(cap.kw)
    if rows_div > 1:
        kw["BS"] = kw["BS"] // rows_div
        args[names.index("TILES")] = args[names.index("TILES")] * rows_div
    ws = args[2]                                     # the zeroed sums and amax buffer the call made

    def run():
        ws.zero_()
        cap.kernel[cap.grid](*args, num_warps=warps, **kw)
    return run


def outputs(cap, idx):
    return [cap.args[i] for i in idx]


def same_bytes(run, bufs, want):
    for b in bufs:
        b.view(torch.uint8).fill_(0xA5)
    run()
    torch.cuda.synchronize()
    return all(torch.equal(b.view(torch.uint8), w.view(torch.uint8)) for b, w in zip(bufs, want))


def ms_in_turns(runs, rounds=3):
    t = {n: [] for n in runs}
    for _ in range(rounds):
        for n, f in runs.items():
            f()
            t[n].append(triton.testing.do_bench(f, warmup=10, rep=100, return_mode="median"))
    return {n: min(x) for n, x in t.items()}


def load_split(path):
    spec = importlib.util.spec_from_file_location("zyfa.triton_kernels.quantize_int8_split", path)  # its relative imports
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


split = load_split(sys.argv[1]) if len(sys.argv) > 1 else None
OUT = (3, 4, 5, 6, 7, 12)                             # q8, k8, V^T, q's, k's and v's descales
for name, shape in (("DeepSeek-V2-Lite 16K", (1, 16384, 16, 16, 192, 128)), ("Mistral-7B 16K", (1, 16384, 32, 8, 128))):
    q, k, v = (t.bfloat16() for t in make("realistic", *shape, seed=1, device="cuda"))
    cap = capture(quantize_int8, "_int8_qkv", lambda: quantize_int8.quantize_int8_qk_fused(q, k, v))
    runs = {"codes: package": codes_launch(cap), "codes: 8 warps": codes_launch(cap, warps=8),
            "codes: V^T 16 rows": codes_launch(cap, bs_v=16), "codes: q,k 1024 elements": codes_launch(cap, bs_div=2),
            "codes: both": codes_launch(cap, bs_div=2, bs_v=16),
            "codes: both, 8 warps": codes_launch(cap, warps=8, bs_div=2, bs_v=16)}
    runs["codes: package"]()
    torch.cuda.synchronize()
    want = [b.clone() for b in outputs(cap, OUT)]
    checks = {n: same_bytes(f, outputs(cap, OUT), want) for n, f in runs.items()}
    if split is not None:
        bcap = capture(split, "_int8_qkv", lambda: split.quantize_int8_qk_fused(q, k, v))
        runs["codes: 192 as 128 + 64"] = codes_launch(bcap)
        checks["codes: 192 as 128 + 64"] = same_bytes(runs["codes: 192 as 128 + 64"], outputs(bcap, OUT), want)
    scap = capture(fused_quantize, "_sums_pass", lambda: fused_quantize.channel_sums(k, v, smooth=True))
    sums = {"sums: package": sums_launch(scap), "sums: 8 warps": sums_launch(scap, warps=8),
            "sums: half-height tiles": sums_launch(scap, rows_div=2),
            "sums: half-height, 8 warps": sums_launch(scap, warps=8, rows_div=2)}
    sums["sums: package"]()
    torch.cuda.synchronize()
    ws = scap.args[2]
    swant = ws.clone()
    for n, f in sums.items():
        f()
        torch.cuda.synchronize()
        checks[n] = torch.equal(ws, swant)
    runs.update(sums)
    t = ms_in_turns(runs)
    print(f"{name}:")
    for n, x in t.items():
        print(f"  {n:28s} {x:.3f} ms  bytes equal to the package's: {checks[n]}", flush=True)
