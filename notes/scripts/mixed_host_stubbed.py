"""Lab (not for the package), session g: the mixed batch's host work on a CPU machine without a
GPU — flash_attn_varlen_func over run 28's batch (16 one-query decodes over 8K keys, two 4K
chunks; GQA 32/8 d128 BF16) with the prefill launch and the decode kernel stubbed out (the
packed tables still built), so what is timed is the wrapper's own Python. Run with
TRITON_INTERPRET=1 (the Triton backend's check) from the repository root."""
import dataclasses
import sys
import time

import torch

sys.path.insert(0, ".")
import zyfa  # noqa: E402
from zyfa import dispatch, packed as zp  # noqa: E402
from zyfa.bench.cases import MIXED_KEYS, MIXED_QUERIES  # noqa: E402
from zyfa.triton_kernels import decode_launch  # noqa: E402

HQ, HKV, D = 32, 8, 128
cu = lambda ls: torch.tensor([0] + [sum(ls[:i + 1]) for i in range(len(ls))], dtype=torch.int32)  # noqa: E731
cq, ck = cu(MIXED_QUERIES), cu(MIXED_KEYS)
q = torch.zeros(int(cq[-1]), HQ, D, dtype=torch.bfloat16)
k = torch.zeros(int(ck[-1]), HKV, D, dtype=torch.bfloat16)
v = torch.zeros_like(k)


def stub_packed(q, k, v, batch, **kw):
    zp.contiguous_tables(q, v, batch)
    return torch.empty(q.shape[0], q.shape[1], v.shape[-1], dtype=q.dtype), torch.empty(q.shape[1], q.shape[0])


def stub_decode(q, k_cache, v_cache, seqlens, table, **kw):
    B, Sq, Hq, _ = q.shape
    return torch.empty(B, Sq, Hq, v_cache.shape[-1], dtype=q.dtype), torch.empty(B, Hq, Sq)


decode_launch.triton_decode = stub_decode
dispatch._BACKENDS[:] = [dataclasses.replace(b, run_packed=stub_packed) if b.name == "triton" else b
                         for b in dispatch._BACKENDS]
call = lambda: zyfa.flash_attn_varlen_func(q, k, v, cq, ck, max(MIXED_QUERIES), max(MIXED_KEYS),  # noqa: E731
                                           causal=True, backend="triton")
call()
t0 = time.perf_counter()
for _ in range(200):
    call()
print(f"host us a call (CPU, launches stubbed): {(time.perf_counter() - t0) / 200 * 1e6:.1f}")
