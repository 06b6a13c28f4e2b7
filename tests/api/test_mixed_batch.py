"""Mixed varlen batches (zyfa.mixed): prefill chunks and 1-16-query decode sequences in one
flash_attn_varlen_func call. Each decode sequence's rows are the decode kernel's
(flash_attn_with_kvcache on that sequence alone) bit for bit, each prefill sequence's the prefill
launch's (the call over the prefill sequences alone) bit for bit, and all of them within their
paths' bounds of float64; packed and paged keys, BF16 and E4M3; explain_varlen says who ran what."""
import pytest
import torch

import zyfa
from zyfa.mixed import explain_varlen
from zyfa.spec.reference import attention_fp64

from conftest import DEVICE, assert_rel, describe_mismatch, rounding_error
from kv_cases import E4M3, _bytes, _e4m3, _randn, fill_pages

# q_lens, k_lens: decodes of 1 and 3 queries between prefill chunks (17+ queries), causal
Q_LENS, K_LENS = [1, 40, 3, 1, 20, 0], [30, 60, 25, 50, 20, 7]
HQ, HKV, D = 4, 2, 64


def _cu(lens):
    c = [0]
    for n in lens:
        c.append(c[-1] + n)
    return torch.tensor(c, dtype=torch.int32)


def _inputs(fp8, seed=3):
    gen = torch.Generator().manual_seed(seed)
    q = _randn(sum(Q_LENS), HQ, D, gen=gen)
    k, v = (_randn(sum(K_LENS), HKV, D, gen=gen) for _ in range(2))
    kw = {}
    if fp8:
        q, k, v = (_e4m3(x, gen) for x in (q, k, v))
        kw = {n: torch.rand(len(Q_LENS), HKV, generator=gen).to(DEVICE) * 0.1 + 0.01
              for n in ("q_descale", "k_descale", "v_descale")}
        kw["ref_rule"] = "running"
    return q, k, v, kw


def _pages(k, v, page):
    """The packed keys as a pool of pages (a sequence's pages in order, shuffled in the pool) and
    its block table."""
    starts = _cu(K_LENS).tolist()
    counts = [-(-n // page) for n in K_LENS]
    pool = sum(counts)
    order = torch.randperm(pool, generator=torch.Generator().manual_seed(1)).tolist()
    kp, vp = (torch.empty(pool, page, *x.shape[1:], dtype=x.dtype, device=DEVICE) for x in (k, v))
    for x in (kp, vp):
        _bytes(x).zero_()
    table = torch.zeros(len(K_LENS), max(counts), dtype=torch.int32)
    fill_pages((kp, vp), [lambda b, lo, hi, x=x: _bytes(x)[starts[b] + lo:starts[b] + hi] for x in (k, v)],
               table, order, K_LENS, page)
    return kp, vp, table


def _keys(k, v, table, b):
    """Sequence b's keys as a dense (1, n, Hkv, D) cache row."""
    n = K_LENS[b]
    if table is None:
        s = _cu(K_LENS)[b].item()
        return k[s:s + n][None], v[s:s + n][None]
    ids = table[b, :-(-n // k.shape[1])].long()
    return tuple(x.index_select(0, ids.to(x.device)).flatten(0, 1)[:n][None] for x in (k, v))


@pytest.mark.parametrize("page", [0, 16])
def test_mixed_batch_parts_are_their_paths(page):
    """BF16 (FP8 batches are not routed: test_not_routed_says_why)."""
    fp8 = False
    q, k, v, kw = _inputs(fp8)
    rule = {}
    table = None
    kargs = {"cu_seqlens_k": _cu(K_LENS)}
    if page:
        k, v, table = _pages(k, v, page)
        kargs = {"seqused_k": torch.tensor(K_LENS, dtype=torch.int32), "block_table": table}
    text = explain_varlen(q, k, v, _cu(Q_LENS), causal=True, **kargs, **rule)
    assert "3 sequence(s) of 1..16 queries on the Triton decode kernel" in text and "decode  sequences [0, 2, 3]" in text
    out, lse = zyfa.flash_attn_varlen_func(q, k, v, _cu(Q_LENS), causal=True, return_lse=True, backend="triton",
                                           **kargs, **kw, **rule)
    assert out.shape == (sum(Q_LENS), HQ, D) and lse.shape == (HQ, sum(Q_LENS))
    starts = _cu(Q_LENS).tolist()
    for b in (0, 2, 3):                               # decode rows: the decode kernel on the sequence alone
        kc, vc = _keys(k, v, table, b)
        d = {n: x[b:b + 1] for n, x in kw.items()}
        o1, l1 = zyfa.flash_attn_with_kvcache(q[starts[b]:starts[b + 1]][None], kc, vc, causal=True,
                                              return_softmax_lse=True, backend="triton", **d)
        # (the decode tile is the same whatever the pages)
        assert torch.equal(out[starts[b]:starts[b + 1]], o1[0]) and torch.equal(lse[:, starts[b]:starts[b + 1]], l1[0])
    pre = [1, 4]                                      # prefill rows: the call over the prefill sequences alone
    q_pre = torch.cat([q[starts[b]:starts[b + 1]] for b in pre])
    kv_pre = [torch.cat([_keys(k, v, table, b)[i][0] for b in pre]) for i in (0, 1)]
    d = {n: x[pre] for n, x in kw.items()}
    o2, l2 = zyfa.flash_attn_varlen_func(q_pre, *kv_pre, _cu([Q_LENS[b] for b in pre]), _cu([K_LENS[b] for b in pre]),
                                         causal=True, return_lse=True, backend="triton", **d, **rule)
    got = torch.cat([out[starts[b]:starts[b + 1]] for b in pre])
    if page == 0:
        assert torch.equal(got, o2), describe_mismatch(got, o2)
    else:                                             # paged: a different key tile order is allowed
        assert_rel(got, o2, 1e-2, "paged prefill rows")
    # and every sequence near float64: a sanity check (the bounds that hold each path are its own
    # tests'; the rows above are those paths' bit for bit)
    for b in range(len(Q_LENS)):
        if not Q_LENS[b]:
            continue
        qv, kv_, vv = _values(q[starts[b]:starts[b + 1]], *_keys(k, v, table, b), kw, b)
        ref = attention_fp64(qv, kv_, vv, causal=True)[0]
        assert_rel(out[starts[b]:starts[b + 1]], ref, (0.1 if fp8 else 4 * rounding_error(ref, torch.bfloat16)),
                   f"sequence {b} vs float64")


def _values(q, k, v, kw, b):
    from zyfa.spec.e4m3 import e4m3_decode
    if q.dtype != E4M3:
        return q[None].double(), k.double(), v.double()
    g = HQ // HKV
    qd = kw["q_descale"][b].double().repeat_interleave(g)[None, :, None]
    dec = [e4m3_decode(x.contiguous().view(torch.uint8)) for x in (q, k, v)]
    return ((dec[0] * qd)[None], dec[1] * kw["k_descale"][b].double()[None, None, :, None],
            dec[2] * kw["v_descale"][b].double()[None, None, :, None])


def test_not_routed_says_why():
    q, k, v, kw = _inputs(True)
    for rule in ("block", "running"):
        text = explain_varlen(q, k, v, _cu(Q_LENS), cu_seqlens_k=_cu(K_LENS), causal=True, ref_rule=rule)
        assert "not routed: FP8" in text
    kp, vp, table = _pages(k, v, 16)
    paged = {"seqused_k": torch.tensor(K_LENS, dtype=torch.int32), "block_table": table}
    assert "not routed: FP8" in explain_varlen(q, kp, vp, _cu(Q_LENS), causal=True, ref_rule="running", **paged)
    q, k, v, _ = _inputs(False)
    assert "not routed: a sliding window" in explain_varlen(q, k, v, _cu(Q_LENS), cu_seqlens_k=_cu(K_LENS),
                                                              causal=True, window_size=(8, 0))
    assert "not routed: backend 'reference'" in explain_varlen(q, k, v, _cu(Q_LENS), cu_seqlens_k=_cu(K_LENS),
                                                                backend="reference")
    mla = torch.cat([q, q[..., :q.shape[-1] // 2]], -1), torch.cat([k, k[..., :k.shape[-1] // 2]], -1)
    text = explain_varlen(*mla, v, _cu(Q_LENS), cu_seqlens_k=_cu(K_LENS), causal=True)
    assert "not routed: the decode kernel cannot run here: the decode kernel takes head dims" in text   # the backend's word


def test_decodes_only_batch():
    """Every sequence a decode: no prefill launch, the decode kernel writes every row."""
    gen = torch.Generator().manual_seed(4)
    q_lens, k_lens = [2, 2, 2], [9, 33, 17]
    q = _randn(sum(q_lens), HQ, D, gen=gen)
    k, v = (_randn(sum(k_lens), HKV, D, gen=gen) for _ in range(2))
    out = zyfa.flash_attn_varlen_func(q, k, v, _cu(q_lens), _cu(k_lens), causal=True, backend="triton")
    starts, kst = _cu(q_lens).tolist(), _cu(k_lens).tolist()
    for b in range(3):
        one = zyfa.flash_attn_with_kvcache(q[starts[b]:starts[b + 1]][None], k[kst[b]:kst[b + 1]][None],
                                           v[kst[b]:kst[b + 1]][None], causal=True, backend="triton")
        assert torch.equal(out[starts[b]:starts[b + 1]], one[0])
