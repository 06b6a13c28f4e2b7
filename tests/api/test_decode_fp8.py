"""flash_attn_with_kvcache's FP8 dots (E4M3 cache, descales per (sequence, kv head)): bit for
bit the spec (fp8_attention_spec, running reference, over each sequence's keys) in the
interpreter, and against float64 within the prefill FP8 path's bound; the splits; the query
quantizer; the choice between the FP8 and widened dots."""
import pytest
import torch

import zyfa
from zyfa.spec.kv_cache import decode_attention_fp64, decode_fp8_spec, decode_query_e4m3
from zyfa.spec.e4m3 import e4m3_decode
from zyfa.decode_splits import decode_splits, even_splits

from conftest import DEVICE, HAS_GPU, assert_rel, describe_mismatch, rel_err, rounding_error
from kv_cases import E4M3, _t, fp8_case

BLOCK_N = 16 if not HAS_GPU else 128     # the interpreter's tile (decode_launch.default_tile); d64 on a GPU


def _check_vs_spec(out, lse, spec, lse_spec, what):
    """As the prefill FP8 kernel is held to its spec (tests/triton): in the interpreter the same
    P bits, so the output is the spec's rounded to BF16 but where the float32 sums (the spec
    sums in float64) sit at a rounding tie (at most 0.1% of the elements, one BF16 step); the
    LSE within float32 rounding. GPU: within 2e-2."""
    if HAS_GPU:
        assert_rel(out, spec, 2e-2, what)
        return
    want = spec.to(out.dtype).double()
    diff = (out.double() - want).abs()
    ulp = want.abs().clamp(min=2.0 ** -126) * 2.0 ** -7
    assert (diff > 0).float().mean() <= 1e-3 and (diff <= ulp).all(), f"{what}: " + describe_mismatch(out, want)
    tol = 8 * 2.0 ** -24 * lse_spec.abs().max().item()
    assert (lse.double() - lse_spec).abs().max() <= tol, f"{what} LSE: " + describe_mismatch(lse, lse_spec, tol)


CASES = [  # B, Sq, Hq, Hkv, D, lens, page, q E4M3, causal
    (2, 2, 8, 2, 64, [2, 37], 0, False, True),           # GQA 4, two causal queries, BF16 q quantized a row
    (2, 2, 8, 2, 64, [2, 37], 16, True, True),           # E4M3 q and its descale, pages of 16
    (3, 1, 8, 1, 64, [1, 17, 40], 32, False, False),     # MQA 8/1, one key, pages the tile's double
    (1, 4, 4, 4, 128, [50], 48, False, True),            # MHA d128, 4 queries, pages gathered a key at a time
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"B{c[0]}q{c[1]}h{c[2]}-{c[3]}d{c[4]}p{c[6]}{'e4m3q' if c[7] else ''}")
def test_fp8_dots_vs_spec_and_fp64(case):
    """One split: the kernel is the spec (same tile); against float64 within the prefill FP8
    bound, 1.1x the spec's error plus the output's rounding."""
    B, Sq, Hq, Hkv, D, lens, page, q_e4m3, causal = case
    q, kc, vc, table, kw = fp8_case(B, Sq, Hq, Hkv, D, lens, page, q_e4m3, seed=sum(lens) + page)
    out, lse = zyfa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=_t(lens), page_table=table, causal=causal,
                                            num_splits=1, return_softmax_lse=True, backend="triton", **kw)
    spec, lse_spec = decode_fp8_spec(q, kc, vc, lens, table, causal=causal, block_n=BLOCK_N, fused_fma=HAS_GPU, **kw)
    _check_vs_spec(out, lse, spec, lse_spec, str(case))
    ref, _ = decode_attention_fp64(q, kc, vc, lens, table, causal=causal, **kw)
    assert_rel(out, ref, 1.1 * rel_err(spec, ref) + rounding_error(ref, out.dtype), f"{case} vs float64")


def test_fp8_dots_splits_and_repeats():
    """Any split count: float64's answer to the one split's error (each split rounds P against
    its own running max; 1.25x as the 16-bit splits are held), and a call repeats bit for bit."""
    q, kc, vc, table, kw = fp8_case(3, 2, 4, 2, 64, [2, 49, 70], 0, False, seed=5)
    lens = [2, 49, 70]
    ref, _ = decode_attention_fp64(q, kc, vc, lens, causal=True, **kw)
    one = zyfa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=_t(lens), causal=True, num_splits=1, **kw)
    base = rel_err(one, ref)
    for splits in (2, 5):
        out, lse = zyfa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=_t(lens), causal=True, num_splits=splits,
                                                return_softmax_lse=True, **kw)
        assert_rel(out, ref, 1.25 * base + 1e-5, f"{splits} splits")
        again = zyfa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=_t(lens), causal=True, num_splits=splits,
                                             return_softmax_lse=True, **kw)
        assert torch.equal(out, again[0]) and torch.equal(lse, again[1])


def test_query_quantizer():
    """decode_query_e4m3: power-of-two descales, each row's largest magnitude in (224, 448] (or 0),
    codes the values rounded once (within half an E4M3 step), an all-zero row all zeros."""
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(2, 3, 4, 64, generator=gen).to(torch.bfloat16) * torch.tensor([1e-3, 1.0, 300.0, 1e5])[:, None]
    q[1, 2, 3] = 0
    codes, d = decode_query_e4m3(q)
    assert codes.dtype == E4M3 and d.shape == (2, 4, 3)
    assert torch.equal(torch.exp2(torch.log2(d).round()), d)
    vals = e4m3_decode(codes.view(torch.uint8))
    top = vals.abs().amax(-1)
    nonzero = top > 0
    assert ((top[nonzero] > 224) & (top[nonzero] <= 448)).all()
    assert not nonzero[1, 2, 3] and nonzero.sum() == nonzero.numel() - 1
    scaled = q.double() / d.permute(0, 2, 1)[..., None].double()        # exact: powers of two
    step = torch.exp2(torch.floor(torch.log2(vals.abs().clamp(min=2.0 ** -6))) - 3)   # E4M3's spacing at a code
    assert ((vals - scaled).abs() <= step / 2).all()


def test_fp8_dots_choice_and_errors():
    """Per-head descales take the FP8 dots, per-token ones (or fp8_dots=False) the widened dots;
    explain says which; fp8_dots=True refuses per-token descales and 16-bit caches."""
    q, kc, vc, table, kw = fp8_case(2, 1, 8, 2, 64, [5, 20], 0, False, seed=3)
    lens = _t([5, 20])
    assert "FP8 dots (q E4M3, quantized a row)" in zyfa.explain_kvcache(q, kc, vc, cache_seqlens=lens, **kw)
    assert "widened to BF16 dots (fp8_dots=False)" in zyfa.explain_kvcache(q, kc, vc, cache_seqlens=lens,
                                                                            fp8_dots=False, **kw)
    tok = {n: torch.ones(2, 2, kc.shape[1], device=DEVICE) for n in ("k_descale", "v_descale")}
    assert "per-token descales" in zyfa.explain_kvcache(q, kc, vc, cache_seqlens=lens, **tok)
    with pytest.raises(NotImplementedError, match="per .sequence, kv head."):
        zyfa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, fp8_dots=True, **tok)
    with pytest.raises(ValueError, match="fp8_dots=True takes an E4M3 cache"):
        zyfa.flash_attn_with_kvcache(q, q, q, fp8_dots=True)
    with pytest.raises(TypeError, match="fp8_dots must be"):
        zyfa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, fp8_dots="yes", **kw)


@pytest.mark.parametrize("programs, least, most, sms, want", [
    (64, 5, 64, 132, 6),        # 8 sequences x 8 kv heads: 384 programs fill 3 rounds at 97%, 320 at 81%
    (256, 2, 16, 132, 2),       # 32 x 8: 512 programs, 97% already
    (8, 33, 64, 132, 33),       # one sequence: 264 programs, two whole rounds
    (64, 5, 5, 132, 5),         # no room above the key limit
])
def test_even_splits(programs, least, most, sms, want):
    assert even_splits(programs, least, most, sms) == want


def test_decode_splits_fill_the_sms():
    cuda = torch.device("cuda")
    assert decode_splits(8, 8, 32768, cuda, sms=132) == 6
    assert decode_splits(128, 8, 2048, cuda, sms=132) == 1
    assert decode_splits(8, 8, 600, cuda, sms=132) == 2          # at least MIN_SPLIT_KEYS keys a split
    # rounds of two programs an SM (the 128-key FP8 tile): 512 programs, not 384 (264 slots:
    # a full round and a tail of 120 programs running one an SM)
    assert decode_splits(8, 8, 32768, cuda, sms=132, per_sm=2) == 8
    assert decode_splits(32, 8, 8192, cuda, sms=132, per_sm=3) == 3     # 768 programs on 396 slots
