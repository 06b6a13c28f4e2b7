"""Context-parallel prefill on W GPUs against one GPU on the same total length: scaling
efficiency (speed-up / W) and how much of the K/V ring's communication the attention hides.

    torchrun --nproc-per-node 2 bench/context_parallel_scaling.py --seqlen 131072 --dtype bf16 --out cp.json
    torchrun --nproc-per-node 2 bench/context_parallel_scaling.py --cpu      # plumbing check (gloo)

Times (median of --reps, CUDA events; a rank's time is the slowest rank's):
  single     flash_attn_func on the whole sequence, rank 0 alone
  cp         context_parallel_attention on the shards (ring + attention + merge)
  compute    each rank's attention calls of the ring, without the ring (its own shard stands in)
  comm       the ring's transfers alone
Exposed communication = cp - compute; efficiency = single / (W * cp).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist

import zyfa
from zyfa.activations import make
from zyfa.bench.measure import rel_err
from zyfa.context_parallel import Ring, context_parallel_attention, gather_sequence, shard_sequence


def _timed(fn, reps: int, device) -> float:
    """Median seconds of fn over reps, all ranks in step; the slowest rank's median."""
    times = []
    for _ in range(reps + 1):                      # the first is a warm-up
        dist.barrier()
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    t = torch.tensor([statistics.median(times[1:])], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqlen", type=int, default=131072)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--dtype", choices=("bf16", "fp8"), default="bf16")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--cpu", action="store_true", help="gloo on the CPU, reference backend, tiny shapes")
    ap.add_argument("--out", help="JSON file for the record (rank 0)")
    a = ap.parse_args(argv)
    if a.cpu:
        a.seqlen, a.heads, a.kv_heads, a.head_dim, a.reps = 64, 2, 1, 64, 1
    dist.init_process_group("gloo" if a.cpu else "nccl")
    world, rank = dist.get_world_size(), dist.get_rank()
    device = torch.device("cpu") if a.cpu else torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = "reference" if a.cpu else "auto"
    q, k, v = make("realistic", 1, a.seqlen, a.heads, a.kv_heads, a.head_dim, seed=0, device=device)
    kw = dict(causal=True, backend=backend)
    if a.dtype == "fp8":
        x = zyfa.quantize_fp8(q, k, v)
        q, k, v = x.q, x.k, x.v.contiguous()
        kw.update(q_descale=x.q_descale, k_descale=x.k_descale, v_descale=x.v_descale)
    ql, kl, vl = (shard_sequence(t, rank, world) for t in (q, k, v))

    def cp():
        return context_parallel_attention(ql, kl, vl, **kw)

    def compute_only():                            # the ring's calls, each on this rank's own shard
        n, c = ql.shape[1], ql.shape[1] // 2
        for step in range(world):
            src = (rank - step) % world
            qrows, keys, diag = ((slice(0, n), slice(0, n), True) if src == rank else
                                 (slice(0, n), slice(0, c), False) if src < rank else
                                 (slice(c, n), slice(0, n), False))
            zyfa.flash_attn_func(ql[:, qrows], kl[:, keys], vl[:, keys], return_lse=True,
                                 **dict(kw, causal=diag))

    def comm_only():
        ring = Ring([kl, vl], None)
        for _ in range(world - 1):
            ring.start()
            ring.finish()

    def single():
        if rank == 0:
            zyfa.flash_attn_func(q, k, v, **kw)

    t = {name: _timed(fn, a.reps, device) for name, fn in
         (("single", single), ("cp", cp), ("compute", compute_only), ("comm", comm_only))}
    out = gather_sequence(cp(), dim=1)
    err = rel_err(out, zyfa.flash_attn_func(q, k, v, **kw)) if rank == 0 else None
    if rank == 0:
        rec = dict(world=world, seqlen=a.seqlen, heads=a.heads, kv_heads=a.kv_heads, head_dim=a.head_dim,
                   dtype=a.dtype, device=torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                   seconds=t, efficiency=t["single"] / (world * t["cp"]), exposed_comm_s=t["cp"] - t["compute"],
                   rel_err_vs_single=err, versions=dict(torch=torch.__version__, zyfa=zyfa.__version__))
        print(json.dumps(rec, indent=1))
        if a.out:
            with open(a.out, "w") as f:
                json.dump(rec, f, indent=1)
    dist.barrier()                # rank 0's last single call done before any rank tears down gloo
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
