"""flash_attn_varlen_func: packed and paged batches against dense flash_attn_func calls."""
import dataclasses
import itertools
import math

import pytest
import torch

import zyfa

from conftest import DEVICE, gpu, hopper
from zyfa.device import host_table

BACKENDS = ["reference", "triton"]
D = 64


def _t(vals):
    return torch.tensor(vals, dtype=torch.int32, device=DEVICE)


def _cu(lens):
    return _t([0] + torch.tensor(lens).cumsum(0).tolist())


def _rand(n, h, seed, d=D):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, h, d, generator=g).to(torch.bfloat16).to(DEVICE)


def _inputs(lens_q, lens_k, fp8, hq=2, hkv=1, seed=0, d=D):
    """Packed q, k, v and kwargs (descales for FP8: per (sequence, kv head), V transposed as
    quantize_fp8 writes it)."""
    q, k, v = (_rand(n, h, seed + i, d) for i, (n, h) in enumerate(((sum(lens_q), hq), (sum(lens_k), hkv),
                                                                     (sum(lens_k), hkv))))
    if not fp8:
        return q, k, v, {}
    x = zyfa.quantize_fp8(q[None], k[None], v[None])
    assert x.v[0].stride(0) == 1                        # the transposed layout
    f = torch.linspace(0.5, 2.0, len(lens_q), device=DEVICE)[:, None]
    ds = {n: (d * f).float() for n, d in (("q_descale", x.q_descale), ("k_descale", x.k_descale),
                                         ("v_descale", x.v_descale))}
    return x.q[0], x.k[0], x.v[0], ds


def _forbid_per_sequence_calls(monkeypatch):
    def per_sequence_call(*a, **kw):
        raise AssertionError("a per-sequence call: the paged batch was not one launch")
    monkeypatch.setattr("zyfa.varlen.api.flash_attn_func", per_sequence_call)


def _seq_descales(ds, i):
    return {n: d[i:i + 1] for n, d in ds.items()}


def _dense(q, k, v, ds, lens_q, lens_k, backend, causal):
    """One call per sequence, the path the packed call gives it: (out rows, lse columns)
    concatenated (_one_sequence)."""
    routed = _routed(q, v, lens_q, lens_k, backend)
    outs, lses, a, c = [], [], 0, 0
    for i, (sq, sk) in enumerate(zip(lens_q, lens_k)):
        if sq:
            o, lse = _one_sequence(q[a:a + sq], k[c:c + sk], v[c:c + sk], _seq_descales(ds, i), causal, None,
                                   backend, routed, i, lens_q)
            outs.append(o)
            lses.append(lse)
        a, c = a + sq, c + sk
    return torch.cat(outs), torch.cat(lses, 1)


def _routed(q, v, lens_q, lens_k, backend):
    """The sequences a packed call sends to the decode kernel (zyfa.mixed.plan)."""
    from zyfa import mixed
    from zyfa.validation import fp8_rules
    fp8 = v.dtype == torch.float8_e4m3fn
    return mixed.plan(q, v, lens_q, lens_k, (-1, -1), backend, fp8, *fp8_rules(fp8, None, None, q.dtype)).decode


def _one_sequence(q, k, v, ds, causal, scale, backend, routed, i, lens_q):
    """(out (sq, H, Dv), lse (H, sq)) of sequence i alone: flash_attn_func, or where the packed
    call routes it, the decode kernel with its queries last among the routed sequences' most
    (zero rows first), as zyfa.mixed pads them."""
    if i not in routed:
        o, lse = zyfa.flash_attn_func(q[None], k[None], v[None], causal=causal, softmax_scale=scale, return_lse=True,
                                      backend=backend, **ds)
        return o[0], lse[0]
    sq, most = q.shape[0], max(lens_q[j] for j in routed)
    padded = torch.cat([torch.zeros(most - sq, *q.shape[1:], dtype=q.dtype, device=q.device), q])
    from zyfa.triton_kernels.decode_launch import triton_decode     # the padding rows may see no key
    o, lse = triton_decode(padded[None], k[None], v[None], _t([k.shape[0]]), None, softmax_scale=scale, causal=causal,
                           **ds)
    return o[0, most - sq:], lse[0, :, most - sq:]


def _varlen(q, k, v, ds, lens_q, lens_k, backend, causal=True, **kw):
    return zyfa.flash_attn_varlen_func(q, k, v, _cu(lens_q), kw.pop("cu_seqlens_k", _cu(lens_k)), max(lens_q),
                                       max(lens_k), causal=causal, return_lse=True, backend=backend, **ds, **kw)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.slow
def test_varlen_equals_dense_per_sequence(backend, fp8, causal):
    lens_q = [1, 7, 0, 37]                              # 1, odd, an empty sequence, > the 32-key tile
    lens_k = lens_q if causal else [3, 7, 2, 33]
    q, k, v, ds = _inputs(lens_q, lens_k, fp8, hq=4, hkv=2)          # GQA
    out, lse = _varlen(q, k, v, ds, lens_q, lens_k, backend, causal)
    ref_out, ref_lse = _dense(q, k, v, ds, lens_q, lens_k, backend, causal)
    assert out.shape == (sum(lens_q), 4, D) and lse.shape == (4, sum(lens_q)) and lse.dtype == torch.float32
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_chunked_prefill_is_the_last_rows_of_a_full_call(backend, fp8):
    """A chunk of new queries over a cached prefix (seqlen_q < seqlen_k) gives the last rows
    of one causal call over the whole sequence. (Chunks of more than 16 queries: shorter ones
    run on the decode kernel, zyfa.mixed, whose rows are not the prefill kernel's bits.)"""
    lens_k, lens_q = [29, 40], [17, 20]
    full_q, k, v, ds = _inputs(lens_k, lens_k, fp8, seed=3)
    ends = torch.tensor(lens_k).cumsum(0).tolist()
    rows = torch.cat([torch.arange(e - n, e) for e, n in zip(ends, lens_q)]).to(DEVICE)
    out, lse = _varlen(full_q[rows], k, v, ds, lens_q, lens_k, backend)
    full_out, full_lse = _dense(full_q, k, v, ds, lens_k, lens_k, backend, True)
    assert torch.equal(out, full_out[rows]) and torch.equal(lse, full_lse[:, rows])


def _paged(k, v, lens_k, page_size, seed):
    """k, v as a shuffled pool of pages with three spare; block_table one page wider than needed."""
    kp, vp, table, used = zyfa.varlen.paged_kv_cache(k, v, _t([0] + list(itertools.accumulate(lens_k))), page_size,
                                                     seed=seed, spare_pages=3)
    return kp, vp, torch.nn.functional.pad(table, (0, 1)), used


@pytest.mark.parametrize("backend,fp8,page_size", [
    ("reference", False, 16), ("reference", True, 64), ("reference", False, 256),
    ("triton", False, 16), ("triton", True, 16), ("triton", False, 256)])
@pytest.mark.slow
def test_paged_equals_contiguous(backend, fp8, page_size):
    lens_q, lens_k = [1, 6, 4], [1, 40, 21]
    q, k, v, ds = _inputs(lens_q, lens_k, fp8, seed=5)
    kp, vp, table, used = _paged(k, v, lens_k, page_size, seed=page_size)
    out, lse = _varlen(q, kp, vp, ds, lens_q, lens_k, backend, cu_seqlens_k=None, block_table=table, seqused_k=used)
    ref_out, ref_lse = _varlen(q, k, v, ds, lens_q, lens_k, backend)
    # (16-bit triton: every sequence 1-16 queries, the decode kernel, whose tile is the same
    # whatever the pages)
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)


def test_seqused_k_with_packed_keys_uses_each_sequence_prefix():
    lens_q, lens_k, used = [2, 3], [6, 9], [4, 9]
    q, k, v, _ = _inputs(lens_q, lens_k, False, seed=9)
    out, lse = _varlen(q, k, v, {}, lens_q, lens_k, "reference", seqused_k=_t(used))
    keep = torch.cat([torch.arange(0, 4), torch.arange(6, 15)]).to(DEVICE)
    ref_out, ref_lse = _varlen(q, k[keep], v[keep], {}, lens_q, used, "reference")
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)


def test_lse_values_and_no_lse_by_default():
    lens = [5, 12]
    q, k, v, _ = _inputs(lens, lens, False, seed=7)
    out, lse = _varlen(q, k, v, {}, lens, lens, "reference")
    assert torch.equal(zyfa.flash_attn_varlen_func(q, k, v, _cu(lens), _cu(lens), 12, 12, causal=True, backend="reference"), out)
    a = 0
    for n in lens:
        s = torch.einsum("qhd,khd->hqk", q[a:a + n].double(), k[a:a + n].double().expand(-1, 2, -1)) / D ** 0.5
        want = torch.logsumexp(s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=DEVICE).triu(1), -math.inf), -1)
        torch.testing.assert_close(lse[:, a:a + n].double(), want, rtol=0, atol=2e-2)
        a += n


def _bad_cases():
    """(what to change, a word the error must contain)."""
    return [
        (dict(cu_seqlens_q=torch.tensor([0, 3, 8], dtype=torch.int64)), "cu_seqlens_q"),
        (dict(cu_seqlens_q=_t([[0, 3, 8]])), "cu_seqlens_q"),
        (dict(cu_seqlens_q=_t([1, 3, 8])), "cu_seqlens_q"),
        (dict(cu_seqlens_q=_t([0, 5, 3, 8])), "cu_seqlens_q"),
        (dict(cu_seqlens_q=_t([0, 3, 7])), "cu_seqlens_q"),
        (dict(cu_seqlens_k=_t([0, 3, 5, 8])), "cu_seqlens_k"),             # batch mismatch
        (dict(cu_seqlens_k=_t([0, 3, 9])), "cu_seqlens_k"),
        (dict(max_seqlen_q=4), "max_seqlen_q"),
        (dict(max_seqlen_k=4), "max_seqlen_k"),
        (dict(max_seqlen_k=5.0), "max_seqlen_k"),
        (dict(cu_seqlens_q=_t([0, 6, 8]), max_seqlen_q=6), "sequence 0"),                 # seqlen_q 6 > seqlen_k 3
        (dict(cu_seqlens_q=_t([0, 1, 8]), max_seqlen_q=7, causal=False, window_size=(2, 1)),
         "sequence 1: window_size right 1"),                                            # seqlen_q 7 > seqlen_k 5 + 1
        (dict(seqused_k=_t([-1, 2])), "seqused_k"),
        (dict(seqused_k=_t([4, 5])), "seqused_k"),
        (dict(q=_rand(8, 3, 0), k=_rand(8, 2, 1), v=_rand(8, 2, 2)), "kv_heads"),
        (dict(q=_rand(8, 2, 0, d=128)), "head"),
        (dict(q=_rand(8, 2, 0).half()), "dtype"),
        (dict(q=_rand(8, 2, 0)[None]), "q"),
        (dict(k=_rand(8, 1, 1)[None]), "k"),
        (dict(q_descale=torch.ones(())), "q_descale"),
        (dict(block_table=_t([[0], [1]]), seqused_k=_t([3, 4])), "cu_seqlens_k"),      # the two lengths disagree
        (dict(block_table=_t([[0], [1]]), cu_seqlens_k=None), "seqused_k"),
        (dict(block_table=torch.zeros(2, 1, dtype=torch.int64), **_pool()), "block_table"),
        (dict(block_table=_t([0, 1]), **_pool()), "block_table"),
        (dict(block_table=_t([[0], [4]]), **_pool()), "block_table"),
        (dict(block_table=_t([[0], [-1]]), **_pool()), "block_table"),
        (dict(block_table=_t([[0], [1]]), **_pool(used=[3, 17])), "block_table"),
        (dict(block_table=_t([[0], [1]]), **_pool(used=[3])), "seqused_k"),
        (dict(block_table=_t([[0], [1]]), **_pool(page_size=8)), "page_size"),
        (dict(block_table=_t([[0], [1]]), **_pool(page_size=272)), "page_size"),
        (dict(block_table=_t([[0], [1]]), **_pool(page_size=24)), "page_size"),
        (dict(block_table=_t([[0, 1]]), **_pool()), "block_table"),        # batch mismatch
    ]


def _pool(page_size=16, pages=3, used=(3, 5)):
    kp = torch.zeros(pages, page_size, 1, D, dtype=torch.bfloat16, device=DEVICE)
    return dict(k=kp, v=kp.clone(), cu_seqlens_k=None, seqused_k=_t(list(used)))


@pytest.mark.parametrize("change,word", _bad_cases())
def test_bad_arguments_name_the_argument(change, word):
    lens_q, lens_k = [3, 5], [3, 5]
    q, k, v, _ = _inputs(lens_q, lens_k, False)
    args = dict(q=q, k=k, v=v, cu_seqlens_q=_cu(lens_q), cu_seqlens_k=_cu(lens_k), max_seqlen_q=5, max_seqlen_k=5,
                causal=True, backend="reference")
    args.update(change)
    with pytest.raises((ValueError, TypeError), match=word):
        zyfa.flash_attn_varlen_func(**args)


def test_fp8_descales_per_sequence_shape_checked():
    lens = [3, 5]
    q, k, v, ds = _inputs(lens, lens, True)
    for bad, word in ((ds["k_descale"][:1].expand(3, -1).contiguous(), "k_descale"),
                      (torch.ones(2, 1, 5), "k_descale"), (ds["k_descale"].double(), "k_descale")):
        with pytest.raises((ValueError, TypeError), match=word):
            _varlen(q, k, v, {**ds, "k_descale": bad}, lens, lens, "reference")
    with pytest.raises(ValueError, match="v_descale"):
        _varlen(q, k, v, {**ds, "v_descale": None}, lens, lens, "reference")


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
@pytest.mark.parametrize("dims", [(64, 64), (192, 128)], ids=["d64", "d192-128"])
@pytest.mark.slow
def test_triton_runs_a_packed_batch_in_one_launch(fp8, dims, monkeypatch):
    """backend="triton": one kernel launch over the packed batch (no per-sequence call), equal
    to the per-sequence calls; keys of sequences that start off a multiple of 16 (FP8 V^T is
    re-packed), seqused_k shorter than a sequence's keys, an empty sequence."""
    d, dv = dims
    lens_q, lens_k, used = [5, 0, 19, 1], [9, 3, 40, 17], [9, 3, 33, 17]
    g = torch.Generator().manual_seed(11)
    q = torch.randn(sum(lens_q), 4, d, generator=g).bfloat16().to(DEVICE)
    k = torch.randn(sum(lens_k), 2, d, generator=g).bfloat16().to(DEVICE)
    v = torch.randn(sum(lens_k), 2, dv, generator=g).bfloat16().to(DEVICE)
    ds = {}
    if fp8:
        x = zyfa.quantize_fp8(q[None], k[None], v[None])
        q, k, v = x.q[0], x.k[0], x.v[0]
        ds = {n: d_.expand(len(lens_q), 2).contiguous() for n, d_ in
              (("q_descale", x.q_descale), ("k_descale", x.k_descale), ("v_descale", x.v_descale))}
    starts = [0] + torch.tensor(lens_k).cumsum(0).tolist()[:-1]
    keep = torch.cat([torch.arange(s, s + u) for s, u in zip(starts, used)]).to(DEVICE)
    ref_out, ref_lse = _dense(q, k[keep], v[keep], ds, lens_q, used, "triton", True)

    def per_sequence_call(*a, **kw):
        raise AssertionError("a per-sequence flash_attn_func call: the packed batch was not one launch")
    monkeypatch.setattr("zyfa.varlen.api.flash_attn_func", per_sequence_call)
    out, lse = _varlen(q, k, v, ds, lens_q, lens_k, "triton", seqused_k=_t(used))
    assert out.shape == (sum(lens_q), 4, dv)
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.slow
def test_random_packed_batches_in_one_launch_equal_per_sequence_calls(seed):
    """Seeded random packed batches on the Triton backend (one launch) against one
    flash_attn_func call a sequence, bit for bit: 1-6 sequences of 0-90 queries over as many
    or more keys (chunked prefill), head dims 64 / 128 / 192-128 / 256, GQA 1-4, BF16, FP16 and
    FP8 with per-sequence descales, causal or not, a non-default softmax_scale, seqused_k."""
    import random
    rng = random.Random(f"varlen:{seed}")
    d, dv = rng.choice([(64, 64), (128, 128), (192, 128), (256, 256)])
    hkv = rng.choice([1, 2])
    hq = hkv * rng.choice([1, 2, 4])
    dtype = rng.choice(["bf16", "fp16", "fp8"])
    if dtype == "fp8" and d == 256:
        dtype = "bf16"                       # FP8 takes head dims 64, 128 and 192/128
    causal = rng.random() < 0.7
    n = rng.randint(1, 6)
    lens_q = [rng.choice([0, 1, rng.randint(2, 90)]) for _ in range(n)]
    lens_k = [q + rng.choice([0, 0, rng.randint(1, 40)]) for q in lens_q]
    lens_k = [max(k, 1) for k in lens_k]
    if sum(lens_q) == 0:
        lens_q[0] = 1
    used = [rng.randint(q if causal else 1, k) if rng.random() < 0.3 else k for q, k in zip(lens_q, lens_k)]
    used = [max(u, 1) for u in used]
    scale = rng.choice([None, 0.05])
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(sum(lens_q), hq, d, generator=g)
    k = torch.randn(sum(lens_k), hkv, d, generator=g)
    v = torch.randn(sum(lens_k), hkv, dv, generator=g)
    ds = {}
    if dtype == "fp8":
        x = zyfa.quantize_fp8(*(t[None].bfloat16().to(DEVICE) for t in (q, k, v)))
        q, k, v = x.q[0], x.k[0], x.v[0]
        f = torch.linspace(0.5, 2.0, n, device=DEVICE)[:, None]
        ds = {name: (getattr(x, name) * f).float() for name in ("q_descale", "k_descale", "v_descale")}
    else:
        cast = torch.bfloat16 if dtype == "bf16" else torch.float16
        q, k, v = (t.to(cast).to(DEVICE) for t in (q, k, v))
    starts = [0] + torch.tensor(lens_k).cumsum(0).tolist()[:-1]
    keep = torch.cat([torch.arange(s, s + u) for s, u in zip(starts, used)]).to(DEVICE)
    outs, lses, a = [], [], 0
    routed = _routed(q, v, lens_q, used, "triton")
    for i, (sq, u) in enumerate(zip(lens_q, used)):
        if sq:
            ks, vs = (t[keep][sum(used[:i]):sum(used[:i]) + u] for t in (k, v))
            o, lse = _one_sequence(q[a:a + sq], ks, vs, _seq_descales(ds, i), causal, scale, "triton", routed, i,
                                   lens_q)
            outs.append(o)
            lses.append(lse)
        a += sq
    out, lse = zyfa.flash_attn_varlen_func(q, k, v, _cu(lens_q), _cu(lens_k), max(lens_q), max(lens_k),
                                           softmax_scale=scale, causal=causal, return_lse=True, backend="triton",
                                           seqused_k=_t(used), **ds)
    what = f"{dtype} d{d}/{dv} H{hq}/{hkv} causal={causal} lens_q={lens_q} lens_k={lens_k} used={used}"
    assert torch.equal(out, torch.cat(outs)), what
    assert torch.equal(lse, torch.cat(lses, 1)), what


def test_auto_takes_one_launch_for_short_sequences_where_a_generated_kernel_would_run(monkeypatch):
    """backend="auto": where the gfx950 kernel (which has no packed path) is the choice, short
    sequences (mean at most SHORT_MEAN_QUERIES) go to one Triton launch, long ones to a call a
    sequence. (Sequences of more than 16 queries: shorter ones go to the decode kernel, zyfa.mixed.)"""
    from zyfa import dispatch, varlen
    lens = [17, 25, 20]
    q, k, v, _ = _inputs(lens, lens, False, seed=13)
    gfx950 = dataclasses.replace(dispatch.by_name("triton"), name="gfx950", run_packed=None, run_paged=None)
    real_select = dispatch.select
    monkeypatch.setattr(dispatch, "select", lambda p, b="auto": gfx950 if b == "auto" else real_select(p, b))
    calls = []
    monkeypatch.setattr(varlen.api, "flash_attn_func", lambda *a, **kw: calls.append(1) or
                        zyfa.flash_attn_func(*a, **{**kw, "backend": "triton"}))
    monkeypatch.setattr(varlen, "SHORT_MEAN_QUERIES", 30)
    out = zyfa.flash_attn_varlen_func(q, k, v, _cu(lens), _cu(lens), 25, 25, causal=True)
    assert calls == []                                   # one launch
    monkeypatch.setattr(varlen, "SHORT_MEAN_QUERIES", 18)
    again = zyfa.flash_attn_varlen_func(q, k, v, _cu(lens), _cu(lens), 25, 25, causal=True)
    assert len(calls) == 3 and torch.equal(out, again)   # a call a sequence, the same answer


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
@pytest.mark.parametrize("page_size", [32, 64, 128, 256])
@pytest.mark.slow
def test_paged_cache_in_one_launch_equals_contiguous(fp8, page_size, monkeypatch):
    """One launch (no per-sequence call), bit for bit the contiguous result: pages of a
    multiple of the key tile read in place from the shuffled pool, smaller ones gathered into
    a packed batch first."""
    lens_q, lens_k = [3, 1, 30], [70, 1, 300]
    q, k, v, ds = _inputs(lens_q, lens_k, fp8, hq=4, hkv=2, seed=17)
    kp, vp, table, used = _paged(k, v, lens_k, page_size, seed=page_size + 1)
    ref_out, ref_lse = _varlen(q, k, v, ds, lens_q, lens_k, "triton")
    _forbid_per_sequence_calls(monkeypatch)
    out, lse = _varlen(q, kp, vp, ds, lens_q, lens_k, "triton", cu_seqlens_k=None, block_table=table, seqused_k=used)
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
@pytest.mark.slow
def test_paged_cache_gathered_only_when_not_read_in_place(fp8, monkeypatch):
    """Pages of 16 keys (below any key tile) are gathered into a packed batch; pages of 256
    are read in place (no gather)."""
    import zyfa.varlen as zv
    lens_q, lens_k = [3, 30], [70, 300]
    q, k, v, ds = _inputs(lens_q, lens_k, fp8, hq=4, hkv=2, seed=19)
    gathers = []
    real = zv._gathered_pages
    monkeypatch.setattr(zv, "_gathered_pages", lambda *a: gathers.append(1) or real(*a))
    for page_size, want in ((16, [1]), (256, [])):
        gathers.clear()
        kp, vp, table, used = _paged(k, v, lens_k, page_size, seed=3)
        _varlen(q, kp, vp, ds, lens_q, lens_k, "triton", cu_seqlens_k=None, block_table=table, seqused_k=used)
        assert gathers == want, page_size


@hopper
@pytest.mark.parametrize("dims", [(128, 128), (192, 128), (64, 64), (256, 256)], ids=lambda d: f"d{d[0]}-{d[1]}")
@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
@pytest.mark.parametrize("causal", [True, False])
def test_ptx_packed_batch_equals_per_sequence_calls(dims, fp8, causal, monkeypatch):
    """The generated kernel's packed path (one launch): bit for bit its per-sequence calls, over
    lengths of 1, odd, longer than a tile, a sequence without queries, GQA, seqused_k."""
    d, dv = dims
    lens_q, lens_k, used = [1, 0, 200, 77, 130], [5, 3, 260, 77, 300], [5, 3, 250, 77, 131]
    lens_q = [min(a, b) for a, b in zip(lens_q, used)] if causal else lens_q
    g = torch.Generator().manual_seed(d + fp8)
    q = torch.randn(sum(lens_q), 4, d, generator=g).bfloat16().cuda()
    k = torch.randn(sum(lens_k), 2, d, generator=g).bfloat16().cuda()
    v = torch.randn(sum(lens_k), 2, dv, generator=g).bfloat16().cuda()
    ds = {}
    if fp8:
        x = zyfa.quantize_fp8(q[None], k[None], v[None])
        q, k, v = x.q[0], x.k[0], x.v[0]
        f = torch.linspace(0.5, 2.0, len(lens_q), device="cuda")[:, None]
        ds = {n: (dd * f).float() for n, dd in (("q_descale", x.q_descale), ("k_descale", x.k_descale),
                                                ("v_descale", x.v_descale))}
    calls = []
    real = zyfa.flash_attn_func
    monkeypatch.setattr("zyfa.varlen.api.flash_attn_func", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    out, lse = zyfa.flash_attn_varlen_func(q, k, v, _cu(lens_q), _cu(lens_k), max(lens_q), max(lens_k), causal=causal,
                                           seqused_k=_t(used), return_lse=True, backend="ptx", **ds)
    assert calls == []                                   # one launch
    outs, lses, a, c = [], [], 0, 0
    for i, (sq, sk, n) in enumerate(zip(lens_q, lens_k, used)):
        if sq:
            o, s_ = real(q[a:a + sq][None], k[c:c + n][None], v[c:c + n][None], causal=causal, return_lse=True,
                         backend="ptx", **_seq_descales(ds, i))
            outs.append(o[0])
            lses.append(s_[0])
        a, c = a + sq, c + sk
    assert torch.equal(out, torch.cat(outs)) and torch.equal(lse, torch.cat(lses, 1))


@hopper
@pytest.mark.parametrize("backend", ["ptx", "triton"])
@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_host_lengths_run_without_a_device_sync(backend, fp8):
    """cu_seqlens on the CPU: the call queues its work without waiting for the GPU (every
    table reaches the device by an asynchronous copy), and gives the device call's bits."""
    lens = [1, 200, 77, 300]
    q, k, v, ds = _inputs(lens, lens, fp8, hq=4, hkv=2, seed=31, d=128)
    want = _varlen(q, k, v, ds, lens, lens, backend)
    cu = _cu(lens).cpu()
    zyfa.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True, backend=backend, **ds)    # compiled
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = zyfa.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True, return_lse=True, backend=backend, **ds)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.equal(out[0], want[0]) and torch.equal(out[1], want[1])


def test_host_table_holds_the_values_on_the_device():
    """device.host_table: a list, or equal-length lists, as int32 on the device."""
    dev = torch.device(DEVICE)
    assert torch.equal(host_table([0, 3, 9], dev).cpu(), torch.tensor([0, 3, 9], dtype=torch.int32))
    two = host_table([[5, 6], [1, 2]], dev)
    assert two.dtype == torch.int32 and two.device.type == dev.type and two.tolist() == [[5, 6], [1, 2]]


@gpu
def test_host_tables_are_copied_once_a_stream():
    """The same values on one stream share one device copy (a model's layers pay no copy after
    the first); other values and another stream each get their own."""
    dev = torch.device("cuda")
    a = host_table([[1, 2, 3], [4, 5, 6]], dev)
    assert host_table([[1, 2, 3], [4, 5, 6]], dev) is a
    assert host_table([[1, 2, 3], [4, 5, 7]], dev) is not a
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        b = host_table([[1, 2, 3], [4, 5, 6]], dev)
    side.synchronize()
    assert b is not a and torch.equal(a, b)


@hopper
@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
@pytest.mark.parametrize("page_size", [16, 64, 128])
def test_ptx_paged_cache_equals_contiguous(fp8, page_size, monkeypatch):
    """A paged cache on the generated kernel: its pages gathered into a packed batch, one launch,
    bit for bit the contiguous packed call."""
    lens_q, lens_k = [3, 1, 200], [70, 1, 300]
    q, k, v, ds = _inputs(lens_q, lens_k, fp8, hq=4, hkv=2, seed=23, d=128)
    ref_out, ref_lse = _varlen(q, k, v, ds, lens_q, lens_k, "ptx")
    kp, vp, table, used = _paged(k, v, lens_k, page_size, seed=page_size)
    _forbid_per_sequence_calls(monkeypatch)
    out, lse = _varlen(q, kp, vp, ds, lens_q, lens_k, "ptx", cu_seqlens_k=None, block_table=table, seqused_k=used)
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_auto_paged_route_where_the_generated_kernel_is_chosen(fp8, monkeypatch):
    """With "auto" choosing the generated kernel for sequences longer than SHORT_MEAN_QUERIES on
    average, pages are gathered for its packed launch, FP8 and BF16 alike, even where the
    Triton kernel could read them in place (no kernel runs)."""
    import zyfa.varlen as zv
    from zyfa import dispatch
    lens_q, lens_k = [zv.SHORT_MEAN_QUERIES + 1, zv.SHORT_MEAN_QUERIES + 3], [zv.SHORT_MEAN_QUERIES + 1, 2 ** 12]
    q, k, v, ds = _inputs(lens_q, lens_k, fp8, hq=4, hkv=2, seed=29)
    kp, vp, table, used = _paged(k, v, lens_k, 256, seed=5)
    routes = []
    ptx = dataclasses.replace(dispatch.by_name("ptx"), run_packed=lambda *a, **kw: routes.append("ptx packed") or
                              (q[:, :, :1], q[0, :, :1]))
    monkeypatch.setattr(dispatch, "select", lambda problem, requested="auto", among=None: ptx)
    real = zv._gathered_pages
    monkeypatch.setattr(zv, "_gathered_pages", lambda *a: routes.append("gathered") or real(*a))
    in_place = lambda *a, **kw: routes.append("triton in place") or (q, q)   # noqa: E731
    monkeypatch.setattr(dispatch, "_BACKENDS", [dataclasses.replace(b, run_paged=in_place) if b.run_paged else b
                                                for b in dispatch.backends()])
    zyfa.flash_attn_varlen_func(q, kp, vp, _cu(lens_q), None, block_table=table, seqused_k=used, causal=True, **ds)
    assert routes == ["gathered", "ptx packed"]


def test_paged_kv_cache_lays_out_each_sequence_in_its_pages():
    k = torch.arange(10 * 2 * 16, dtype=torch.float32).reshape(10, 2, 16).bfloat16()
    kp, vp, table, used = zyfa.varlen.paged_kv_cache(k, k, _t([0, 3, 10]).cpu(), 16, seed=1, spare_pages=3)
    assert kp.shape == (5, 16, 2, 16) and used.tolist() == [3, 7] and table.shape == (2, 1)
    assert torch.equal(kp[table[1, 0], :7], k[3:10]) and (kp[table[0, 0], 3:] == 0).all()
    with pytest.raises(ValueError, match="page_size"):
        zyfa.varlen.paged_kv_cache(k, k, _t([0, 10]).cpu(), 24)


@pytest.mark.parametrize("key_order", [False, True], ids=["natural", "hopper"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "slice"])
def test_packed_vt_is_each_sequences_v_transposed(key_order, layout):
    """packed_vt (one Triton launch): sequence i's V^T at its 16-key start, zeros to the next,
    in the Hopper key order (the spec's hopper_vt of that sequence alone) when asked; lengths
    1, 16, odd, 0 and longer than a 256-slot tile, sequences not in storage order, Dv 128."""
    from zyfa.spec.key_order import hopper_vt
    from zyfa.hopper_vt import packed_vt
    lens = [1, 16, 37, 0, 300, 50]
    starts = [354, 1, 17, 0, 54, 0]            # where each sequence's keys sit in v
    g = torch.Generator().manual_seed(7)
    u = torch.randint(0, 256, (404, 2, 128), generator=g, dtype=torch.uint8)
    if layout == "transposed":                 # quantize_fp8's V: keys contiguous
        u = u.permute(1, 2, 0).contiguous().permute(2, 0, 1)
    elif layout == "slice":                    # every other key of a longer V
        u = torch.randint(0, 256, (808, 2, 128), generator=g, dtype=torch.uint8)[::2]
    v = u.to(DEVICE).view(torch.float8_e4m3fn)
    vt, v_starts, table = packed_vt(v, starts, lens, key_order)
    vt = vt.view(torch.uint8)[0].permute(1, 2, 0).cpu()     # (Hkv, Dv, P)
    assert vt.shape[-1] == sum(n + (-n) % 16 for n in lens) and v_starts[-1] == vt.shape[-1] - 64
    assert table.device == v.device and table.tolist() == [v_starts, starts, lens]   # the kernels' rows
    for s0, v0, n in zip(starts, v_starts, lens):
        one = u[s0:s0 + n][None]
        want = (hopper_vt(one)[0] if key_order else
                torch.nn.functional.pad(one[0].permute(1, 2, 0), (0, (-n) % 16)))
        assert torch.equal(vt[..., v0:v0 + n + (-n) % 16], want)


@pytest.mark.parametrize("pool_layout", ["page V^T", "rows"])
@pytest.mark.parametrize("page", [16, 64, 128])
@pytest.mark.parametrize("key_order", [False, True], ids=["natural", "hopper"])
def test_packed_vt_reads_a_paged_pool_in_place(key_order, page, pool_layout):
    """packed_vt over a shuffled paged pool (paged_kv_cache's FP8 layout, each page's V^T
    contiguous, or rows as stored) writes the bytes and tables it writes for the same keys
    packed."""
    from zyfa.hopper_vt import packed_vt
    lens = [1, 16, 37, 0, 300, 50]
    g = torch.Generator().manual_seed(11)
    u = torch.randint(0, 256, (sum(lens), 2, 128), generator=g, dtype=torch.uint8)
    v = u.to(DEVICE).view(torch.float8_e4m3fn)
    cu = torch.tensor([0] + list(itertools.accumulate(lens)), dtype=torch.int32)
    _, pool, table, _ = zyfa.varlen.paged_kv_cache(v, v, cu, page, seed=3, spare_pages=2)
    if pool_layout == "rows":
        pool = pool.contiguous()
    pages = [table[i, :-(-n // page)] for i, n in enumerate(lens)]
    starts = cu[:-1].tolist()
    want, want_starts, want_table = packed_vt(v, starts, lens, key_order)
    got, got_starts, got_table = packed_vt(pool, starts, lens, key_order, pages=pages)
    assert got_starts == want_starts and torch.equal(got_table, want_table)
    assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))
