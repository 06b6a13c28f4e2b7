"""Lab script (run 45): where quantize_int8_qk's codes launch (_int8_qkv) spends its time, part by
part: the same launch with the other parts' tile counts set to 0 (their programs exit at once),
beside the sums launch and the whole call; and a variant with k's programs first in the grid (the same bits); the k part at 64-key blocks of work per program
(the same bits would need the block amax shared: here only its time, to see if the 128-key
block's serial two sweeps are the cost). Shapes: DeepSeek-V2-Lite 16K (MHA 16, 192 / 128),
Mistral-7B 16K (GQA 32/8, 128). do_bench medians, L2 cleared."""
import os

import torch
import triton

import zyfa
from zyfa.activations import make
from zyfa.spec.constants import KEY_BLOCK
from zyfa.triton_kernels import quantize_int8
from zyfa.triton_kernels.quantize import channel_sums
from zyfa.triton_kernels.quantize_int8 import _int8_qkv


def _k_first_source():
    """_int8_qkv with k's programs first in the grid (axis 2 = 0: k, 1: q): the longest programs
    (a 128-key block swept twice) start first, q's and v's short ones fill in around them."""
    import inspect
    src = inspect.getsource(_int8_qkv.fn).replace("@triton.jit\n", "").replace("def _int8_qkv(", "def _int8_qkv_k_first(")
    src = src.replace("    if which == 0:\n        if tile < NTQ:", "    if which == 1:\n        if tile < NTQ:")
    src = src.replace("    elif which == 1:\n        if tile < NTK:", "    elif which == 0:\n        if tile < NTK:")
    assert src.count("which == 1") == 1 and src.count("which == 0") == 1
    return src


def _k_first_kernel():
    """The variant as a module of its own (Triton reads a kernel's source from its file)."""
    import importlib.util
    import tempfile
    path = os.path.join(tempfile.mkdtemp(), "int8_qkv_k_first.py")
    with open(path, "w") as fh:
        fh.write("import triton\nimport triton.language as tl\n"
                 "from zyfa.triton_kernels.quantize_int8 import _int8_rows, quantize_tile, channel_mean\n\n\n"
                 "@triton.jit\n" + _k_first_source())
    spec = importlib.util.spec_from_file_location("int8_qkv_k_first", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod._int8_qkv_k_first


_int8_qkv_k_first = _k_first_kernel()


class _Captured:
    """Stands in for the codes kernel during one call of the package's quantizer and keeps the
    launch it was asked for (grid, arguments), so that the lab launches it again with changes."""
    def __init__(self):
        self.grid = self.args = self.kw = None

    def __getitem__(self, grid):
        def keep(*args, **kw):
            self.grid, self.args, self.kw = grid, list(args), kw
        return keep


def launch(q, k, v, parts, key_block=KEY_BLOCK, kernel=_int8_qkv, outs=None):
    """The package's codes launch for (q, k, v) with only ``parts`` of q, k, v given tiles."""
    cap = _Captured()
    quantize_int8._int8_qkv = cap
    try:
        quantize_int8.quantize_int8_qk_fused(q, k, v, key_block=key_block)     # the sums launch runs for real
    finally:
        quantize_int8._int8_qkv = _int8_qkv
    args, names = cap.args, _int8_qkv.arg_names
    for part, name in (("q", "NTQ"), ("k", "NTK"), ("v", "NTV")):
        if part not in parts:
            args[names.index(name)] = 0
    grid = (cap.grid[0], max(1, *(args[names.index(n)] for n in ("NTQ", "NTK", "NTV"))), 3)
    if outs is not None:
        outs.extend(args[3:8] + [args[12]])            # q8, k8, vt, qd, kd, vd

    def call():
        kernel[grid](*args, **cap.kw)
    return call


def ms(fn):
    fn()
    return triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="median")


for name, shape in (("DeepSeek-V2-Lite 16K", (1, 16384, 16, 16, 192, 128)), ("Mistral-7B 16K", (1, 16384, 32, 8, 128))):
    q, k, v = (t.bfloat16() for t in make("realistic", *shape, seed=1, device="cuda"))
    t = {"whole call": ms(lambda: zyfa.quantize_int8_qk(q, k, v, fused=True)),
         "sums launch": ms(lambda: channel_sums(k, v, smooth=True))}
    for parts in ("qkv", "q", "k", "v"):
        t[f"codes {parts}"] = ms(launch(q, k, v, parts))
    a, b = [], []
    t["codes qkv, k first"] = ms(launch(q, k, v, "qkv", kernel=_int8_qkv_k_first, outs=a))
    launch(q, k, v, "qkv", outs=b)()
    torch.cuda.synchronize()
    print("k first bit-equal:", all(torch.equal(x, y) for x, y in zip(a, b)))
    t["codes k, 64-key programs"] = ms(launch(q, k, v, "k", key_block=64))
    t["codes k, 32-key programs"] = ms(launch(q, k, v, "k", key_block=32))
    copy_dst = [torch.empty_like(x) for x in (q, k, v)]
    t["copy q,k,v"] = ms(lambda: [d.copy_(s) for d, s in zip(copy_dst, (q, k, v))])
    print(name + ": " + ", ".join(f"{n} {x:.3f}" for n, x in t.items()), flush=True)
