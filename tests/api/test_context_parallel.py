"""Context-parallel attention (zyfa.context_parallel) on 2, 3 and 4 CPU processes (gloo)
against the single-process call, backend="reference".

What equality to expect. Rank r's rows get one partial (out_s, lse_s) per source rank s whose
shard holds keys they see (n of them, n <= world); the reference backend computes each in
float64 (BF16/FP16: exact attention; FP8: the blockwise spec) and returns out_s rounded to the
output dtype (unit roundoff u_o: 2^-8 BF16, 2^-11 FP16) and lse_s rounded to float32 (u = 2^-24).
The merge runs n - 1 float32 log-sum-exp steps. With exact partials (o^_s, l^_s), merged l^ =
logsumexp l^_s, weights w_s = exp(l^_s - l^), o^ = sum w_s o^_s, and per row L = max(|l^_s|, |l^|):

  LSE:  the partials' rounding u L, each merge step (difference, exp, log1p, add) u (3 L + 3),
        the single call's rounding u L:
          |lse_cp - lse_single| <= E + u L,     E = u (L + (n - 1)(3 L + 3)).
  out:  the partials' rounding u_o sum w_s |o^_s| =: u_o S; the weights' relative error
        eps = n (2 E + 2 u L + 5 u) (n exp factors, each off by its argument's error, and the
        products and sums); the final roundings of both results u_o / (1 - u_o) of each:
          |out_cp - out_single| <= u_o / (1 - u_o) (|out_cp| + |out_single|) + (u_o + 1.01 eps) S.

  The output bound is 1.5 to 3 units in the last place; E is u ((3n - 2) L + 3 (n - 1)), at
  world 4 and |LSE| ~ 5 about 60 u, some 15 float32 ulps of the LSE. The test computes S, L and
  n per element from float64 partials.

FP8. The spec runs 128-key blocks (fp8_attention_spec's block_n=128) from each call's first key,
with per-block row maxima (ref_rule "block"). A chunk boundary that is not a multiple of 128
cuts blocks differently from the single call, so the rounded probabilities differ: equality is
not to be expected (the test checks that the bound above fails there), only errors against exact
attention on the dequantized inputs compare. The context-parallel error is checked to be at most
FP8_RATIO = 1.25 times the single call's (the context-parallel blocks being the 7- and 9-key
chunks, its error is not expected to be larger). Where the chunk length is
a multiple of 128 the blocks coincide, so by the spec's definition every probability has the
single call's E4M3 bits (under ref_rule "block" a block's P depends on its own keys only; other
reference rules carry state across blocks and are not covered), and the bound above holds with
the spec's partials (checked with per-head and per-token descales).
"""
import math
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from conftest import rel_err

import zyfa
from zyfa.activations import make
from zyfa.context_parallel import context_parallel_attention, gather_sequence, shard_sequence, unshard_sequence
from zyfa.spec.descales import is_per_key_block, normalize_descales
from zyfa.spec.reference import attention_fp64, fp8_attention_spec

U32 = 2.0 ** -24
FP8_RATIO = 1.25


def _case(name, world, C, causal=True, kind="bf16", B=1, heads=(4, 2, 64, 64), seed=0):
    return dict(name=name, world=world, S=2 * world * C, C=C, causal=causal, kind=kind, B=B, heads=heads, seed=seed)


CASES = [
    _case("bf16_causal_gqa", 2, 7), _case("bf16_full_gqa", 2, 7, causal=False),
    _case("bf16_mla", 2, 5, B=2, heads=(4, 2, 192, 128), seed=1),
    _case("fp8_causal_c7", 2, 7, kind="head"), _case("fp8_causal_c128", 2, 128, kind="head"),
    _case("fp8_fine_full_c128", 2, 128, causal=False, kind="fine", seed=2),
    _case("int8_causal_c128", 2, 128, kind="int8", seed=5),      # k descales a block of 128 keys
    _case("bf16_causal_gqa", 3, 7), _case("bf16_full_gqa", 3, 7, causal=False),
    _case("fp16_causal", 3, 6, kind="fp16", heads=(2, 2, 128, 128), seed=3),
    _case("fp8_causal_c7", 3, 7, kind="head"), _case("fp8_mla_c9", 3, 9, kind="head", heads=(4, 2, 192, 128)),
    _case("bf16_causal_gqa", 4, 7, B=2), _case("bf16_full_gqa", 4, 7, causal=False),
    _case("fp8_causal_c7", 4, 7, kind="head", seed=4), _case("fp8_full_c7", 4, 7, causal=False, kind="head"),
]


def _inputs(case):
    """Full-sequence q, k, v and descales (keyword arguments of flash_attn_func)."""
    Hq, Hkv, D, Dv = case["heads"]
    dtype = torch.float16 if case["kind"] == "fp16" else torch.bfloat16
    q, k, v = make("realistic" if case["kind"] in ("head", "fine", "int8") else "gaussian", case["B"], case["S"], Hq,
                   Hkv, D, Dv, seed=case["seed"], dtype=dtype)
    if case["kind"] in ("bf16", "fp16"):
        return dict(q=q, k=k, v=v)
    if case["kind"] == "int8":           # chunks of 128 keys: a rank's k descales are the blocks it holds
        return zyfa.quantize_int8_qk(q, k, v).kwargs()
    return zyfa.quantize_fp8(q, k, v, granularity=case["kind"], block_size=32).kwargs()


def _shard_kwargs(kw, rank, world):
    out = {}
    for name, x in kw.items():
        if name in ("q", "k", "v"):
            out[name] = shard_sequence(x, rank, world, dim=1)
        elif name in ("q_descale", "k_descale") and x.dim() == 3:
            out[name] = shard_sequence(x, rank, world, dim=2)
        else:
            out[name] = x
    return out


def _cp(kw, **extra):
    """context_parallel_attention on flash_attn_func-style keyword arguments (q=, k=, v=, descales)."""
    kw = dict(kw)
    return context_parallel_attention(kw.pop("q"), kw.pop("k"), kw.pop("v"), backend="reference", **kw, **extra)


def _error_cases(rank, world):
    """(name, call) pairs each expected to raise on every rank."""
    x = torch.randn(1, 8, 2, 64).bfloat16()
    odd = x[:, :7]
    mine = x if rank == 0 else torch.randn(1, 8, 4, 64).bfloat16()
    return [("odd_length", lambda: context_parallel_attention(odd, odd, odd, backend="reference")),
            ("rank_shapes", lambda: context_parallel_attention(mine, mine, mine, backend="reference")),
            ("seqlen_q_ne_k", lambda: context_parallel_attention(x[:, :4], x, x, causal=False, backend="reference"))]


def _worker(rank, world, port, outdir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    results = {}
    try:
        for case in (c for c in CASES if c["world"] == world):
            local = _shard_kwargs(_inputs(case), rank, world)
            out, lse = _cp(local, causal=case["causal"], return_lse=True)
            results[case["name"]] = (out, lse)
        if world == 2:
            for name, call in _error_cases(rank, world):
                try:
                    call()
                    results[name] = None
                except (ValueError, TypeError) as e:
                    results[name] = f"{type(e).__name__}: {e}"
            kw = _inputs(CASES[0])
            solo_groups = [dist.new_group([r]) for r in range(world)]   # every rank makes every group
            results["solo"] = _cp(kw, group=solo_groups[rank], return_lse=True)
            out, lse = results["bf16_causal_gqa"]
            results["gathered"] = (gather_sequence(out), gather_sequence(lse, dim=2))
    finally:
        torch.save(results, os.path.join(outdir, f"rank{rank}.pt"))
        dist.destroy_process_group()


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Small float64 problems run faster on one thread, and the ranks share the cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def spawned(tmp_path_factory):
    """Each world size is spawned once (a failure too); {world: [rank results]}."""
    cache = {}

    def get(world):
        if world not in cache:
            outdir = str(tmp_path_factory.mktemp(f"world{world}"))
            try:
                mp.spawn(_worker, args=(world, _free_port(), outdir), nprocs=world, join=True)
                cache[world] = [torch.load(os.path.join(outdir, f"rank{r}.pt"), weights_only=False)
                                for r in range(world)]
            except Exception as e:     # noqa: BLE001  (reported by every test of this world size)
                cache[world] = e
        if isinstance(cache[world], Exception):
            raise cache[world]
        return cache[world]
    return get


def _partials(kw, case):
    """Per source rank s, float64 partials (out (B, S, H, Dv), lse (B, H, S); lse -inf where rows
    see none of s's keys) over s's key chunks {s, 2W-1-s}: what the merge combines."""
    W, C, causal = case["world"], case["C"], case["causal"]
    q, k, v = kw["q"], kw["k"], kw["v"]
    B, S, Hq, _ = q.shape
    fp8 = v.dtype == torch.float8_e4m3fn            # q and k E4M3 or int8
    parts = []
    for s in range(W):
        out = torch.zeros(B, S, Hq, v.shape[-1], dtype=torch.float64)
        lse = torch.full((B, Hq, S), -math.inf, dtype=torch.float64)
        for c in range(2 * W):
            seen = [j for j in sorted((s, 2 * W - 1 - s)) if not causal or j <= c]
            if not seen:
                continue
            rows = slice(c * C, (c + 1) * C)
            keys = torch.cat([torch.arange(j * C, (j + 1) * C) for j in seen])
            diag = causal and c in seen             # then c is the last chunk seen: bottom-right aligned
            if fp8:
                qd, kd = kw["q_descale"], kw["k_descale"]
                if is_per_key_block(kd, k.shape[1]):         # a descale a block: one a key
                    kd = normalize_descales(q, k, v, None, kd, None)[1]
                o, l = fp8_attention_spec(q[:, rows], k[:, keys], v[:, keys],
                                          qd[..., rows] if qd.dim() == 3 else qd,
                                          kd[..., keys] if kd.dim() == 3 else kd, kw["v_descale"],
                                          causal=diag, return_lse=True)
            else:
                o, l = attention_fp64(q[:, rows], k[:, keys], v[:, keys], causal=diag, return_lse=True)
            out[:, rows], lse[..., rows] = o, l
        parts.append((out, lse))
    return parts


def _check_merge_bound(out, lse, ref, ref_lse, parts, u_o):
    """The module docstring's bounds, per element; returns the largest difference/bound ratios."""
    lses = torch.stack([l for _, l in parts])                        # (W, B, H, S)
    lhat = torch.logsumexp(lses, 0)
    present = torch.isfinite(lses)
    n = present.sum(0).double()
    L = torch.maximum(torch.where(present, lses.abs(), 0.0).amax(0), lhat.abs())
    E = U32 * (L + (n - 1) * (3 * L + 3))
    lse_bound = E + U32 * L
    w = torch.exp(lses - lhat).transpose(2, 3)[..., None]            # (W, B, S, H, 1)
    S = (w * torch.stack([o.abs() for o, _ in parts])).sum(0)
    eps = (n * (2 * E + 2 * U32 * L + 5 * U32)).transpose(1, 2)[..., None]
    a, b = out.double(), ref.double()
    out_bound = u_o / (1 - u_o) * (a.abs() + b.abs()) + (u_o + 1.01 * eps) * S
    d_out, d_lse = (a - b).abs(), (lse.double() - ref_lse.double()).abs()
    r_out = torch.where(d_out > 0, d_out / out_bound, 0.0).max().item()
    r_lse = torch.where(d_lse > 0, d_lse / lse_bound, 0.0).max().item()
    assert r_out <= 1 and r_lse <= 1, f"worst difference/bound: out {r_out:.3f}, lse {r_lse:.3f}"
    return r_out, r_lse


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"w{c['world']}-{c['name']}")
@pytest.mark.slow
def test_matches_single_process(spawned, case):
    per_rank = spawned(case["world"])
    out = unshard_sequence([r[case["name"]][0] for r in per_rank], dim=1)
    lse = unshard_sequence([r[case["name"]][1] for r in per_rank], dim=2)
    kw = _inputs(case)
    ref, ref_lse = zyfa.flash_attn_func(causal=case["causal"], return_lse=True, backend="reference", **kw)
    assert out.dtype == ref.dtype and out.shape == ref.shape and lse.shape == ref_lse.shape
    if case["kind"] == "head" and case["C"] % 128:
        # blocks cut differently: compare both errors against exact attention on the dequantized inputs
        exact, exact_lse = attention_fp64(*zyfa.FP8Inputs(**kw).dequantized(), causal=case["causal"],
                                          return_lse=True)
        assert rel_err(out, exact) <= FP8_RATIO * rel_err(ref, exact)
        assert rel_err(lse, exact_lse) <= FP8_RATIO * rel_err(ref_lse, exact_lse)
        with pytest.raises(AssertionError, match="worst difference/bound"):     # and not the merge's equality
            _check_merge_bound(out, lse, ref, ref_lse, _partials(kw, case), 2.0 ** -8)
        return
    u_o = 2.0 ** -11 if case["kind"] == "fp16" else 2.0 ** -8
    _check_merge_bound(out, lse, ref, ref_lse, _partials(kw, case), u_o)


def test_errors_group_of_one_and_gather(spawned):
    per_rank = spawned(2)
    for r in per_rank:
        assert "must be divisible by 2 * world = 4" in r["odd_length"]
        assert "ranks [1]" in r["rank_shapes"] and "(1, 8, 4, 64)" in r["rank_shapes"]
        assert "seqlen_q == seqlen_k" in r["seqlen_q_ne_k"]
    kw = _inputs(CASES[0])
    ref = zyfa.flash_attn_func(causal=True, return_lse=True, backend="reference", **kw)
    out = unshard_sequence([r["bf16_causal_gqa"][0] for r in per_rank])
    lse = unshard_sequence([r["bf16_causal_gqa"][1] for r in per_rank], dim=2)
    for r in per_rank:
        assert all(torch.equal(a, b) for a, b in zip(r["solo"], ref))     # a group of one: the plain call
        assert torch.equal(r["gathered"][0], out) and torch.equal(r["gathered"][1], lse)


def test_shard_roundtrip_and_errors():
    x = torch.arange(2 * 3 * 12 * 5).reshape(2, 12, 3, 5)
    shards = [shard_sequence(x, r, 3) for r in range(3)]
    assert shards[0][0, :, 0, 0].tolist() == [0, 15, 150, 165]          # chunks 0 and 5 of 6 (2 tokens each)
    assert torch.equal(unshard_sequence(shards), x)
    with pytest.raises(ValueError, match="must be divisible by 2 \\* world = 8"):
        shard_sequence(x, 0, 4)
    # no process group: the single-process call
    kw = _inputs(CASES[0])
    assert torch.equal(_cp(kw),
                       zyfa.flash_attn_func(causal=True, backend="reference", **kw))


def test_scaling_script_runs_on_the_cpu(tmp_path):
    """bench/context_parallel_scaling.py's plumbing (gloo, 2 processes, tiny shapes): it times
    every variant and its gathered output matches the single call."""
    import json
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
    out = tmp_path / "cp.json"
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                        "--master-addr", "127.0.0.1", "--master-port", str(_free_port()),
                        os.path.join(root, "bench", "context_parallel_scaling.py"), "--cpu", "--out", str(out)],
                       capture_output=True, text=True, cwd=root, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    rec = json.loads(out.read_text())
    assert rec["world"] == 2 and set(rec["seconds"]) == {"single", "cp", "compute", "comm"}
    assert all(t > 0 for t in rec["seconds"].values())
    assert rec["rel_err_vs_single"] < 2 ** -7          # bf16 outputs, merged in float32
