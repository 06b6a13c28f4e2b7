"""flash_attn_with_kvcache: the Triton decode kernel against float64 attention over the cache,
dense and paged, BF16/FP16 and E4M3, against itself across layouts and splits, and its checks."""
import math
import os

import pytest
import torch

import zyfa
from zyfa.spec.e4m3 import e4m3_decode
from zyfa.spec.kv_cache import decode_attention_fp64, sequence_keys
from zyfa.triton_kernels.decode_launch import DecodeTile, triton_decode

from conftest import DEVICE, assert_rel, describe_mismatch
from kv_cases import E4M3, _bytes, _cache, _e4m3, _nan, _paged, _randn, _t


def _paged_descale(d, lens, table, page, pool):
    """A dense per-token descale (B, Hkv, cap) laid out as the pool's (pages, Hkv, page)."""
    out = torch.ones(pool, d.shape[1], page, dtype=torch.float32, device=DEVICE)
    for b, n in enumerate(lens):
        for j in range(-(-n // page)):
            rows = min(page, n - j * page)
            out[int(table[b, j]), :, :rows] = d[b, :, j * page:j * page + rows]
    return out


def _baseline(q, ks, vs, causal, dtype):
    """The same precision in torch: float64 attention over the (dequantized) cache with P and
    the output rounded to ``dtype`` (BF16 for E4M3 caches, which the kernel computes in BF16)."""
    outs = []
    B, Sq, Hq, D = q.shape
    for b in range(B):
        k, v = ks[b], vs[b]
        g = Hq // k.shape[1]
        s = torch.einsum("qhd,khd->hqk", q[b].double(), k.repeat_interleave(g, 1)) / math.sqrt(D)
        if causal:
            Sk = k.shape[0]
            s = s.masked_fill(torch.arange(Sk, device=q.device)[None] >
                              torch.arange(Sq, device=q.device)[:, None] + Sk - Sq, float("-inf"))
        p = torch.exp(s - s.amax(-1, keepdim=True))
        o = torch.einsum("hqk,khd->qhd", p.to(dtype).double(), v.repeat_interleave(g, 1))
        outs.append((o / p.sum(-1).transpose(0, 1)[..., None]).to(dtype))
    return torch.stack(outs)


def _check(q, kc, vc, lens, causal, table=None, what="", **kw):
    """Run the kernel; hold output and LSE to float64 with bounds from the torch baseline;
    return (out, lse)."""
    out, lse = zyfa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=_t(lens), page_table=table, causal=causal,
                                            return_softmax_lse=True, backend="triton", **kw)
    descales = {n: kw.get(n) for n in ("q_descale", "k_descale", "v_descale")}
    ref, lse_ref = decode_attention_fp64(q, kc, vc, lens, table, causal=causal, **descales)
    qv = q.double() if q.dtype != E4M3 else e4m3_decode(q.view(torch.uint8))
    if descales["q_descale"] is not None:
        qv = qv * descales["q_descale"].double().repeat_interleave(q.shape[2] // kc.shape[2], 1)[:, None, :, None]
    ks = sequence_keys(kc, descales["k_descale"], lens, table)
    vs = sequence_keys(vc, descales["v_descale"], lens, table)
    half = torch.float16 if q.dtype == torch.float16 else torch.bfloat16
    base = ((_baseline(qv, ks, vs, causal, half).double() - ref).norm() / ref.norm()).item()
    assert out.shape == (*q.shape[:3], vc.shape[-1]) and out.dtype == half
    # the kernel rounds P (per-token V: P times the key's descale) as the baseline rounds P; the
    # float32 sums' order and the output's rounding add the rest
    assert_rel(out, ref, 1.5 * base + 1e-5, f"{what} out")
    assert lse.shape == (q.shape[0], q.shape[2], q.shape[1]) and lse.dtype == torch.float32
    lse_bound = _lse_bound(qv, ks, causal, lse_ref)
    assert (lse.double() - lse_ref).abs().max() <= lse_bound, f"{what} LSE: " + describe_mismatch(lse, lse_ref, lse_bound)
    return out, lse


def _lse_bound(qv, ks, causal, lse_ref):
    """4x the error of torch's float32 logsumexp on the same scores, plus a few float32 ulps."""
    err = 0.0
    Sq, Hq, D = qv.shape[1:]
    for b, k in enumerate(ks):
        s = torch.einsum("qhd,khd->hqk", qv[b].float(), k.float().repeat_interleave(Hq // k.shape[1], 1))
        s = s / math.sqrt(D)
        if causal:
            Sk = k.shape[0]
            s = s.masked_fill(torch.arange(Sk, device=s.device)[None] >
                              torch.arange(Sq, device=s.device)[:, None] + Sk - Sq, float("-inf"))
        err = max(err, (torch.logsumexp(s, -1).double() - lse_ref[b]).abs().max().item())
    return 4 * err + 4 * 2.0 ** -24 * lse_ref.abs().max().item()


CASES = [  # B, Sq, Hq, Hkv, D, lens, page (0: dense), causal, dtype
    (3, 1, 8, 1, 64, [1, 17, 40], 0, True, torch.bfloat16),           # MQA 8/1, one key, odd lengths
    (3, 4, 32, 8, 64, [4, 17, 35], 16, True, torch.bfloat16),         # GQA 32/8, speculative 4 queries, pages 16
    (2, 1, 4, 1, 128, [1, 300], 256, False, torch.float16),           # pages 256, a length past one page
    (2, 3, 8, 2, 64, [5, 33], 48, True, torch.bfloat16),              # 24 rows padded to 32, pages 48
    (1, 16, 4, 4, 64, [16], 0, True, torch.bfloat16),                 # 16 queries, MHA, the cache all queries
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"B{c[0]}q{c[1]}h{c[2]}-{c[3]}d{c[4]}p{c[6]}")
@pytest.mark.slow
def test_16bit_vs_fp64(case):
    B, Sq, Hq, Hkv, D, lens, page, causal, dtype = case
    gen = torch.Generator().manual_seed(sum(lens) * 31 + Sq)
    q = _randn(B, Sq, Hq, D, gen=gen, dtype=dtype)
    kc, vc = _cache(B, max(lens) + 5, Hkv, D, lens, dtype, gen)
    table = None
    if page:
        kc, vc, table = _paged(kc, vc, lens, page, gen)
    _check(q, kc, vc, lens, causal, table, what=str(case))


@pytest.mark.parametrize("scales", ["head", "token", "q_e4m3"])
@pytest.mark.parametrize("page", [0, 16])
def test_e4m3_cache_vs_fp64(scales, page):
    """E4M3 K/V widened to BF16 dots (fp8_dots=False; per-token descales take that path
    anyway) against float64 on the dequantized cache; descales per (sequence, kv head), per
    token (the pool's layout when paged), or with E4M3 q and its descale."""
    B, Sq, Hq, Hkv, D, lens, causal = 2, 2, 8, 2, 64, [2, 37], True
    gen = torch.Generator().manual_seed(7 + page)
    kc, vc = _cache(B, max(lens) + 3, Hkv, D, lens, E4M3, gen)
    kw = {}
    if scales == "token":
        kd, vd = (torch.rand(B, Hkv, kc.shape[1], generator=gen).to(DEVICE) * 0.1 + 0.01 for _ in range(2))
    else:
        kd, vd = (torch.rand(B, Hkv, generator=gen).to(DEVICE) * 0.1 + 0.01 for _ in range(2))
    q = _randn(B, Sq, Hq, D, gen=gen)
    if scales == "q_e4m3":
        q = _e4m3(q, gen)
        kw["q_descale"] = torch.rand(B, Hkv, generator=gen).to(DEVICE) * 0.1 + 0.01
    table = None
    if page:
        kc, vc, table = _paged(kc, vc, lens, page, gen)
        if scales == "token":
            kd, vd = (_paged_descale(d, lens, table, page, kc.shape[0]) for d in (kd, vd))
    _check(q, kc, vc, lens, causal, table, what=f"E4M3 {scales}", k_descale=kd, v_descale=vd, fp8_dots=False, **kw)


def _layouts_case(seed=3, dtype=torch.bfloat16):
    gen = torch.Generator().manual_seed(seed)
    B, Sq, Hq, Hkv, D, lens = 3, 2, 4, 2, 64, [2, 49, 70]
    q = _randn(B, Sq, Hq, D, gen=gen)
    kc, vc = _cache(B, 80, Hkv, D, lens, dtype, gen)
    return gen, q, kc, vc, lens


@pytest.mark.parametrize("page,block_n,most_lookups", [(16, 16, 8), (16, 32, 8), (16, 64, 8), (16, 64, 2),
                                                        (48, 32, 8), (64, 32, 8)],
                         ids=["tile=page", "two-pages", "four-pages", "gather-16", "gather-48", "tile-in-page"])
@pytest.mark.slow
def test_paged_equals_dense_bitwise(page, block_n, most_lookups, monkeypatch):
    """A paged cache computes what the dense cache holding the same keys computes, bit for bit
    (same tile and splits), whether a tile takes one page lookup, one a page, or one a key."""
    from zyfa.triton_kernels import decode_launch
    monkeypatch.setattr(decode_launch, "MAX_PAGE_LOOKUPS", most_lookups)
    gen, q, kc, vc, lens = _layouts_case()
    kp, vp, table = _paged(kc, vc, lens, page, gen)
    tile = DecodeTile(block_n, 4, 1)
    for splits in (1, 3):
        dense = triton_decode(q, kc, vc, _t(lens), None, causal=True, num_splits=splits, tile=tile)
        paged = triton_decode(q, kp, vp, _t(lens), table, causal=True, num_splits=splits, tile=tile)
        for a, b in zip(dense, paged):
            assert torch.equal(a, b), f"page {page} splits {splits}: " + describe_mismatch(b, a)


@pytest.mark.slow
def test_splits_agree_and_repeat_bitwise():
    """Every split count gives float64's answer to float32 merge rounding (empty splits
    included: 9 splits of 2..70 keys in 16-key tiles), and a call repeats bit for bit."""
    gen, q, kc, vc, lens = _layouts_case(seed=5)
    ref, lse_ref = decode_attention_fp64(q, kc, vc, lens, causal=True)
    one = zyfa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=_t(lens), causal=True, num_splits=1,
                                       return_softmax_lse=True)
    base = (one[0].double() - ref).norm() / ref.norm()
    for splits in (2, 5, 9):
        out, lse = zyfa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=_t(lens), causal=True, num_splits=splits,
                                                return_softmax_lse=True)
        assert_rel(out, ref, 1.25 * base + 1e-5, f"{splits} splits")
        assert (lse.double() - lse_ref).abs().max() < 1e-5, describe_mismatch(lse, lse_ref, 1e-5)
        again = zyfa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=_t(lens), causal=True, num_splits=splits,
                                             return_softmax_lse=True)
        assert torch.equal(out, again[0]) and torch.equal(lse, again[1])


def test_causal_offsets_are_bottom_right():
    """Query i of seqlen_q queries over n keys is the single query over the first
    n - seqlen_q + i + 1 keys."""
    gen, q, kc, vc, lens = _layouts_case(seed=9)
    out = zyfa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=_t(lens), causal=True, num_splits=1)
    for i in range(q.shape[1]):
        short = [n - q.shape[1] + i + 1 for n in lens]
        one = zyfa.flash_attn_with_kvcache(q[:, i:i + 1].contiguous(), kc, vc, cache_seqlens=_t(short), causal=True,
                                           num_splits=1)
        torch.testing.assert_close(out[:, i:i + 1], one, rtol=0, atol=2 ** -8 * out.abs().max().item())
    full = zyfa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=_t(lens), causal=False, num_splits=1)
    assert not torch.equal(full[:, 0], out[:, 0])            # the mask hid keys from query 0


@pytest.mark.parametrize("dtype", [torch.bfloat16, E4M3])
def test_leftpad_equals_the_shifted_cache(dtype):
    """cache_leftpad: sequence b's keys are tokens [left, n) of its row; NaN in the padding must not
    be read. Bit for bit the cache with those keys moved to the row's start (same tiles and
    splits), on a (batch, kv_heads, len, d) cache read through a transposed view (transformers'
    layout), with per-token E4M3 descales moved along; the reference backend agrees."""
    gen = torch.Generator().manual_seed(13)
    B, Sq, Hq, Hkv, D, lens, left = 3, 2, 4, 2, 64, [40, 70, 9], [5, 0, 7]
    q = _randn(B, Sq, Hq, D, gen=gen)
    kc, vc = _cache(B, 72, Hkv, D, lens, dtype, gen)
    kw = {}
    if dtype == E4M3:
        kw = {n: torch.rand(B, Hkv, 72, generator=gen).to(DEVICE) + 0.5 for n in ("k_descale", "v_descale")}
    for b, n in enumerate(left):                    # padding: NaN keys, NaN descales
        _bytes(kc)[b, :n] = _bytes(_nan(kc.dtype))
        _bytes(vc)[b, :n] = _bytes(_nan(vc.dtype))
        for d in kw.values():
            d[b, :, :n] = float("nan")
    shifted = [torch.full_like(t, float("nan")) if t.dtype != E4M3 else t.clone() for t in (kc, vc)]
    moved = {n: torch.ones_like(d) for n, d in kw.items()}
    for b, (n, s) in enumerate(zip(lens, left)):
        for t, src in zip(shifted, (kc, vc)):
            _bytes(t)[b, :n - s] = _bytes(src)[b, s:n]
        for name, d in kw.items():
            moved[name][b, :, :n - s] = d[b, :, s:n]
    views = [t.transpose(1, 2).contiguous().transpose(1, 2) for t in (kc, vc)]      # (B, Hkv, len, d) storage
    for splits in (1, 3):
        got = zyfa.flash_attn_with_kvcache(q, *views, cache_seqlens=_t(lens), cache_leftpad=_t(left), causal=True,
                                           num_splits=splits, return_softmax_lse=True, **kw)
        want = zyfa.flash_attn_with_kvcache(q, *shifted, cache_seqlens=_t([n - s for n, s in zip(lens, left)]),
                                            causal=True, num_splits=splits, return_softmax_lse=True, **moved)
        for a, w in zip(got, want):
            assert torch.equal(a, w), f"splits {splits}: " + describe_mismatch(a, w)
    ref = zyfa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=torch.tensor(lens, dtype=torch.int32),
                                       cache_leftpad=torch.tensor(left, dtype=torch.int32), causal=True,
                                       backend="reference", **kw)
    assert_rel(got[0], ref, 1e-2, "leftpad kernel vs reference")


def test_reference_backend_and_int_seqlens():
    gen, q, kc, vc, lens = _layouts_case(seed=11)
    lens = [70, 70, 70]
    kc, vc = _cache(3, 70, 2, 64, lens, torch.bfloat16, gen)
    ref = zyfa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=70, causal=True, backend="reference")
    out = zyfa.flash_attn_with_kvcache(q, kc, vc, causal=True)           # None: the whole dense cache
    assert_rel(out, decode_attention_fp64(q, kc, vc, lens, causal=True)[0], 1e-2, "kernel")
    assert_rel(ref, decode_attention_fp64(q, kc, vc, lens, causal=True)[0], 2 ** -8, "reference")


def test_explain_kvcache():
    gen, q, kc, vc, lens = _layouts_case()
    text = zyfa.explain_kvcache(q, kc, vc, cache_seqlens=_t(lens), causal=True)
    assert text.startswith("selected: triton") and "key split" in text and "4 query rows" in text
    text = zyfa.explain_kvcache(q, kc, vc, cache_seqlens=_t(lens), backend="reference")
    assert text.startswith("selected: reference")


def test_fp8_tile_follows_whether_the_batch_fills_the_gpu(monkeypatch):
    """With the FP8 dots at head dim 128 a batch whose (sequence, kv head) programs fill the GPU
    twice without splits takes the 128-key tile and one split; a smaller one the 64-key tile
    (three programs an SM) and splits; neither depends on the pages. 16-bit caches gather pages
    shorter than the tile a key at a time."""
    from zyfa import decode_splits
    from zyfa.triton_kernels import decode_launch
    for module in (decode_launch, decode_splits):       # the tile's choice and the split count's
        monkeypatch.setattr(module, "interpreter_active", lambda: False)
        monkeypatch.setattr(module, "sm_count", lambda device: 132)
    cuda = torch.device("cuda")
    for page in (0, 16, 64):
        big, one = decode_launch.tile_and_splits(128, page, True, 128, 8, 2048, cuda)
        small, many = decode_launch.tile_and_splits(128, page, True, 32, 8, 8192, cuda)
        assert (big.block_n, big.per_sm, one) == (128, 2, 1) and (small.block_n, small.per_sm) == (64, 3) and many > 1
    assert decode_launch.pages_a_tile(16, small) == 4 and decode_launch.pages_a_tile(64, big) == 2
    assert decode_launch.pages_a_tile(48, small) == 0 and decode_launch.pages_a_tile(128, big) == 1
    assert decode_launch.pages_a_tile(16, decode_launch.default_tile(128)) == 0


def test_explain_kvcache_says_the_splits_the_launch_takes(monkeypatch):
    """explain_kvcache and the launch count splits over the same tile's programs an SM."""
    import dataclasses
    from zyfa.triton_kernels import decode_launch
    real = decode_launch.default_tile
    monkeypatch.setattr(decode_launch, "default_tile", lambda *a, **k: dataclasses.replace(real(*a, **k), per_sm=2))
    monkeypatch.setattr(decode_launch, "decode_splits", lambda *a, per_sm=1, **k: 3 * per_sm)
    gen, q, kc, vc, lens = _layouts_case()
    assert "6 key split(s)" in zyfa.explain_kvcache(q, kc, vc, cache_seqlens=_t(lens), causal=True)


@pytest.mark.parametrize("kw,error,match", [
    ({"k": "new"}, NotImplementedError, "k "),
    ({"rotary_cos": "cos"}, NotImplementedError, "rotary_cos"),
    ({"window_size": (8, 0)}, NotImplementedError, "window_size"),
    ({"softcap": 30.0}, NotImplementedError, "softcap"),
    ({"cache_batch_idx": "idx"}, NotImplementedError, "cache_batch_idx"),
    ({"pack_gqa": False}, NotImplementedError, "pack_gqa"),
    ({"cache_leftpad": "left_over"}, ValueError, r"cache_leftpad\[2\] is 69"),
    ({"cache_leftpad": "left_short"}, ValueError, r"cache_leftpad must have shape \(3,\)"),
    ({"cache_seqlens": [3, 4, 5]}, TypeError, "cache_seqlens must be an int32"),
    ({"cache_seqlens": "len_over"}, ValueError, r"cache_seqlens\[1\] is 81"),
    ({"cache_seqlens": "len_causal"}, ValueError, "causal needs >= seqlen_q 2"),
    ({"k_descale": "ones"}, ValueError, "descales apply to E4M3 only"),
    ({"num_splits": -1}, ValueError, "num_splits must be an int >= 0"),
    ({"page_table": "both"}, ValueError, "not both"),
    ({"q": "long"}, ValueError, "1..16 queries"),
])
def test_bad_arguments(kw, error, match):
    gen, q, kc, vc, lens = _layouts_case()
    args = dict(cache_seqlens=_t(lens), causal=True)
    fill = {"new": torch.zeros(1), "cos": torch.zeros(1), "idx": _t([0, 1, 2]), "ones": torch.ones(()),
            "len_over": torch.tensor([2, 81, 3], dtype=torch.int32), "len_causal": torch.tensor([1, 5, 5], dtype=torch.int32),
            "left_over": torch.tensor([0, 0, 69], dtype=torch.int32), "left_short": _t([0, 0]),
            "both": _t([[0]] * 3), "long": torch.zeros(3, 17, 4, 64, dtype=torch.bfloat16, device=DEVICE)}
    for name, val in kw.items():
        val = fill.get(val, val) if isinstance(val, str) else val
        if name == "q":
            q = val
        elif name == "page_table":
            args.update(page_table=val, block_table=val)
        else:
            args[name] = val
    if "cache_leftpad" in kw:      # leftpad's upper bound is read from cache_seqlens on the host (no device sync)
        args["cache_seqlens"] = args["cache_seqlens"].cpu()
    with pytest.raises(error, match=match):
        zyfa.flash_attn_with_kvcache(q, kc, vc, **args)


def test_bad_pages_and_fp8_arguments():
    gen, q, kc, vc, lens = _layouts_case()
    kp, vp, table = _paged(kc, vc, lens, 16, gen)
    bad = table.clone().cpu()
    bad[2, 1] = 10 ** 6
    with pytest.raises(ValueError, match="page_table row 2 uses page 1000000"):
        zyfa.flash_attn_with_kvcache(q, kp, vp, cache_seqlens=torch.tensor(lens, dtype=torch.int32), page_table=bad)
    with pytest.raises(ValueError, match="page_size"):
        zyfa.flash_attn_with_kvcache(q, kp[:, :8], vp[:, :8], cache_seqlens=_t(lens), page_table=table)
    with pytest.raises(ValueError, match="needs cache_seqlens"):
        zyfa.flash_attn_with_kvcache(q, kp, vp, page_table=table)
    k8, v8 = _cache(3, 80, 2, 64, lens, E4M3, gen)
    with pytest.raises(ValueError, match="missing v_descale"):
        zyfa.flash_attn_with_kvcache(q, k8, v8, cache_seqlens=_t(lens), k_descale=torch.ones(()))
    with pytest.raises(ValueError, match=r"allowed shapes are \(\), \(2,\), \(3, 2\) or \(3, 2, 80\)"):
        zyfa.flash_attn_with_kvcache(q, k8, v8, cache_seqlens=_t(lens), k_descale=torch.ones(3, 2, 7),
                                     v_descale=torch.ones(()))
    with pytest.raises(TypeError, match="q must be"):
        zyfa.flash_attn_with_kvcache(q.half(), k8, v8, cache_seqlens=_t(lens), k_descale=torch.ones(()),
                                     v_descale=torch.ones(()))


def test_zyfa_backend_variable(monkeypatch):
    """ZYFA_BACKEND names a decode backend, or (a prefill-only one) leaves the choice automatic."""
    gen, q, kc, vc, lens = _layouts_case()
    monkeypatch.setenv("ZYFA_BACKEND", "reference")
    assert zyfa.explain_kvcache(q, kc, vc, cache_seqlens=_t(lens)).startswith("selected: reference")
    monkeypatch.setenv("ZYFA_BACKEND", "ptx")
    assert zyfa.explain_kvcache(q, kc, vc, cache_seqlens=_t(lens)).startswith("selected: triton")


# (kernel specialization, whether it compiles without spills today). Compiled without the
# launcher's divisibility marks some spill: their loads compile a byte or two at a time. With the
# strides marked as the launcher specializes them (aligned) they do not, the key-by-key page
# gather included; the FP8 dots are checked so (tiles as default_tile picks them, and the
# 64-row wgmma tile)
_FP8 = dict(kv="fp8", kd_mode=1, vd_mode=1, fp8_dot=True, aligned=True)
DECODE_SPECS = [
    (dict(_FP8, block_n=128), True), (dict(_FP8, block_n=128, q_fp8=True, split=False, causal=False), True),
    (dict(_FP8, block_n=32, page=16), True), (dict(_FP8, block_n=64, page=64), True),
    (dict(_FP8, block_n=128, page=64), True),
    (dict(_FP8, block_n=32, sq=4, group=8, head_dim=256), True), (dict(_FP8, block_n=64, block_m=64), True),
    (dict(_FP8, block_n=128, hw_round=False), True), (dict(page=16, block_n=16, aligned=True), True),
    (dict(kv="fp8", kd_mode=2, vd_mode=2, page=16, aligned=True), True), (dict(leftpad=True, aligned=True), True),
    (dict(), True), (dict(split=False, causal=False), True), (dict(page=64), True),
    (dict(page=16), False), (dict(kv="fp8", kd_mode=1, vd_mode=1), False),
    (dict(kv="fp8", kd_mode=2, vd_mode=2, page=16), False), (dict(kv="fp8", kd_mode=1, vd_mode=1, q_fp8=True), False),
    (dict(sq=4, group=8, head_dim=256, block_n=32), True), (dict(sq=16, group=1, head_dim=64), True),
    (dict(leftpad=True), False), (dict(kv="fp8", kd_mode=2, vd_mode=2, leftpad=True), False)]


def _compiled(code: str, spec: dict):
    """What ``code`` prints (JSON) about the decode kernel ``spec`` (its sys.argv[1], JSON),
    compiled on the CPU in a process without TRITON_INTERPRET (the interpreter's kernels cannot be)."""
    import json
    import subprocess
    import sys
    code = "import json, re, sys; from zyfa.verify.triton_compile import assemble_compiled, compile_decode; " + code
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", code, json.dumps(spec)], capture_output=True, text=True, env=env,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _compiled_for_sm90(spec: dict) -> tuple[int, int, int]:
    """(registers, spill bytes, shared bytes) of the decode kernel ``spec`` compiled for sm_90a."""
    return tuple(_compiled("k = compile_decode('sm90', **json.loads(sys.argv[1])); a = assemble_compiled(k); "
                           "print(json.dumps([a.registers, a.spill_bytes, k.metadata.shared]))", spec))


@pytest.mark.parametrize("spec, no_spills", DECODE_SPECS)
@pytest.mark.slow
def test_decode_kernel_compiles_for_sm90(spec, no_spills):
    """The compiler takes what the interpreter runs (it refuses, e.g., branches returning a scalar
    in one place and a tensor in another): every constexpr path, compiled for sm_90a on the CPU;
    the paths marked so without spills."""
    registers, spills, _ = _compiled_for_sm90(spec)
    assert spills == 0 or not no_spills, (spec, registers, spills)


# the Triton decode kernel is the portable path: every FP8 / 16-bit form, dense and paged, for MI355X
GFX950_SPECS = [(dict(), "bf16"), (dict(page=64), "bf16"), (dict(kv="fp8", kd_mode=1, vd_mode=1), "bf16"),
                (dict(kv="fp8", kd_mode=2, vd_mode=2, page=16), "bf16"),
                (dict(sq=4, group=8, head_dim=256, block_n=32), "bf16"),
                (dict(kv="fp8", kd_mode=1, vd_mode=1, fp8_dot=True, hw_round=False, block_n=128), "f8f6f4"),
                (dict(kv="fp8", kd_mode=1, vd_mode=1, fp8_dot=True, hw_round=False, q_fp8=True, page=64), "f8f6f4")]


@pytest.mark.parametrize("spec, mfma", GFX950_SPECS)
@pytest.mark.slow
def test_decode_kernel_compiles_for_gfx950(spec, mfma):
    """For MI355X on the CPU: the dots on the matrix cores (the FP8 dots on its FP8 MFMA, the
    rounding by arithmetic: the GPU conversion's inline PTX is CUDA's only) and no scratch."""
    mfmas, scratch = _compiled("a = compile_decode('gfx950', **json.loads(sys.argv[1])).asm['amdgcn']; "
                               "print(json.dumps([sorted(set(re.findall(r'v_mfma\\w+', a))), "
                               "[int(n) for n in re.findall(r'\\.private_segment_fixed_size:\\s+(\\d+)', a)]]))",
                               spec)
    assert any(mfma in m for m in mfmas), (spec, mfmas)
    assert scratch and not any(scratch), (spec, scratch)


@pytest.mark.parametrize("head_dim, page, fills", [(128, 0, False), (128, 0, True), (128, 64, False),
                                                   (128, 64, True), (128, 16, False), (128, 16, True), (64, 0, False),
                                                   (64, 16, False)])
@pytest.mark.slow
def test_fp8_decode_tiles_state_the_programs_an_sm_holds(head_dim, page, fills, monkeypatch):
    """decode_splits counts rounds in default_tile's per_sm programs an SM: that many fit by
    registers and shared memory (sm_90a, compiled as the launcher specializes the FP8 dots,
    dense and with the page lookups a paged cache takes), and one more does not."""
    from zyfa.triton_kernels import decode_launch
    monkeypatch.setattr(decode_launch, "interpreter_active", lambda: False)     # a GPU's tile
    t = decode_launch.default_tile(head_dim, fp8_dot=True, fills_gpu=fills)
    registers, _, shared = _compiled_for_sm90(dict(_FP8, head_dim=head_dim, block_n=t.block_n,
                                                   num_stages=t.num_stages, page=page, page_lookups=t.page_lookups))
    by_registers = 65536 // (-(-registers // 8) * 8 * 32 * t.num_warps)
    by_shared = 232448 // max(shared, 1)          # sm_90's 227 KB a block, 228 KB an SM
    assert t.per_sm == min(by_registers, by_shared), (t, registers, shared)
