"""plan_kvcache: flash_attn_with_kvcache's checks and choice made once, then run on the layers
of a decoding step. Its runs give flash_attn_with_kvcache's bits; a tensor laid out otherwise
than planned is refused by name; the plan's sequence lengths are read at each launch."""
import pytest
import torch

import zyfa

from conftest import DEVICE
from kv_cases import E4M3, _cache, _randn, _t, fp8_case


def _bf16_layers(n, seed=0, lens=(5, 37, 20)):
    """q and n layers' dense BF16 caches of one layout (GQA 8/2, d64, two queries)."""
    gen = torch.Generator().manual_seed(seed)
    q = _randn(len(lens), 2, 8, 64, gen=gen)
    return q, [_cache(len(lens), max(lens) + 3, 2, 64, lens, torch.bfloat16, gen) for _ in range(n)], _t(list(lens))


def _same(a, b):
    return all(torch.equal(x.view(torch.uint8), y.view(torch.uint8)) for x, y in zip(a, b))


def test_runs_give_flash_attn_with_kvcache_bits_layer_by_layer():
    q, layers, lens = _bf16_layers(3)
    plan = zyfa.plan_kvcache(q, *layers[0], cache_seqlens=lens, causal=True)
    assert plan.backend == zyfa.explain_kvcache(q, *layers[0], cache_seqlens=lens, causal=True).split()[1]
    for kc, vc in layers:
        got = plan.run(q, kc, vc, return_softmax_lse=True)
        want = zyfa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, causal=True, return_softmax_lse=True)
        assert _same(got, want) and torch.isfinite(got[0]).all()
    assert torch.equal(plan.run(q, *layers[1]), zyfa.flash_attn_with_kvcache(q, *layers[1], cache_seqlens=lens,
                                                                            causal=True))


@pytest.mark.parametrize("page", [0, 16])
def test_e4m3_paged_and_dense_runs_with_each_layers_descales(page):
    q, kc, vc, table, ds = fp8_case(2, 1, 8, 2, 64, [40, 19], page, True, seed=3)
    plan = zyfa.plan_kvcache(q, kc, vc, cache_seqlens=_t([40, 19]), page_table=table, causal=True, **ds)
    for scale in (1.0, 0.5):                          # a second layer: its own descales, same layout
        layer = {n: d * scale for n, d in ds.items()}
        got = plan.run(q, kc, vc, return_softmax_lse=True, **layer)
        want = zyfa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=_t([40, 19]), page_table=table, causal=True,
                                            return_softmax_lse=True, **layer)
        assert _same(got, want)


def test_a_tensor_laid_out_otherwise_is_refused_by_name():
    q, [(kc, vc)], lens = _bf16_layers(1)
    plan = zyfa.plan_kvcache(q, kc, vc, cache_seqlens=lens)
    with pytest.raises(ValueError, match=r"k_cache \(3, 40, 2, 64\) strides .* \(planned \(3, 40, 2, 64\)"):
        plan.run(q, kc.transpose(1, 2).contiguous().transpose(1, 2), vc)       # same shape, other strides
    with pytest.raises(ValueError, match="v_cache .*float16.*planned"):
        plan.run(q, kc, vc.half())
    with pytest.raises(ValueError, match="q .*planned"):
        plan.run(q[:2], kc, vc)
    with pytest.raises(ValueError, match="not 16-byte aligned"):
        wide = torch.empty(kc.numel() + 1, dtype=kc.dtype, device=DEVICE)[1:].view(kc.shape)
        plan.run(q, wide, vc)
    q8, k8, v8, _, ds = fp8_case(2, 1, 8, 2, 64, [40, 19], 0, False, seed=1)
    plan8 = zyfa.plan_kvcache(q8, k8, v8, cache_seqlens=_t([40, 19]), **ds)
    with pytest.raises(ValueError, match="k_descale None"):
        plan8.run(q8, k8, v8, v_descale=ds["v_descale"])
    with pytest.raises(ValueError, match="v_descale a float, not a tensor"):
        plan8.run(q8, k8, v8, k_descale=ds["k_descale"], v_descale=0.5)
    assert k8.dtype == E4M3


def test_the_plan_reads_its_sequence_lengths_at_each_launch():
    """Lengths on q's device are the plan's own tensor, as a CUDA graph holds them: changed in
    place, the next run reads them."""
    q, [(kc, vc)], lens = _bf16_layers(1, lens=(5, 37, 20))
    plan = zyfa.plan_kvcache(q, kc, vc, cache_seqlens=lens)
    lens.copy_(_t([4, 30, 1]))
    assert torch.equal(plan.run(q, kc, vc), zyfa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=_t([4, 30, 1])))


def test_planning_checks_what_a_call_checks():
    q, [(kc, vc)], lens = _bf16_layers(1)
    with pytest.raises(ValueError, match="cache_seqlens\\[1\\] is 99"):
        zyfa.plan_kvcache(q, kc, vc, cache_seqlens=torch.tensor([5, 99, 20], dtype=torch.int32))
    with pytest.raises(TypeError, match="k_cache and v_cache must share one dtype"):
        zyfa.plan_kvcache(q, kc, vc.half(), cache_seqlens=lens)
