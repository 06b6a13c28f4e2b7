"""What `zyfa bench --cases decode` times: zyfa's decode kernel on dense and paged caches, BF16
and E4M3, FlashAttention-3's flash_attn_with_kvcache (BF16, FP8) and a device copy of the cache
(the bandwidth ceiling). A case's cache is its k, v; the E4M3 cache, q and descales are
quantize_fp8's per-head ones, which zyfa and FA3 both read."""
from __future__ import annotations

import torch

import zyfa

from .anchors import gpu_missing, out_and_lse, unimportable
from .methods import Inputs, Method, zyfa_missing

PAGE = 64                         # the paged methods' page size


def paged(k, v, page: int, seed: int = 0):
    """A dense cache (B, Sk, Hkv, d), Sk a multiple of ``page``, as a pool of pages in shuffled
    order, as a serving engine's allocator leaves them: (k_pages, v_pages, block_table int32)."""
    B, Sk = k.shape[:2]
    n = Sk // page
    table = torch.randperm(B * n, generator=torch.Generator().manual_seed(seed)).view(B, n).to(k.device)
    pools = []
    for x in (k, v):
        pool = torch.empty((B * n, page, *x.shape[2:]), dtype=x.dtype, device=x.device)
        pool.view(torch.uint8)[table.flatten().long()] = x.reshape(B * n, page, *x.shape[2:]).view(torch.uint8)
        pools.append(pool)
    return pools[0], pools[1], table.to(torch.int32)


def _cache_args(inp: Inputs, dtype: str, page: int | None) -> dict:
    """flash_attn_with_kvcache's arguments for a case: q and the cache (FP8: E4M3 q, k, v and
    their per-(sequence, kv head) descales), paged or dense, every cache row in use."""
    if dtype == "fp8":
        x = inp.fp8("head")
        B, hkv = inp.case.B, inp.case.Hkv
        q, k, v = x.q, x.k, x.v.contiguous()
        ds = {n: getattr(x, n).expand(B, hkv).contiguous() for n in ("q_descale", "k_descale", "v_descale")}
    else:
        q, k, v, ds = inp.q, inp.k, inp.v, {}
    lens = torch.full((inp.case.B,), inp.case.Sk, dtype=torch.int32, device=q.device)
    a = dict(q=q, k_cache=k, v_cache=v, cache_seqlens=lens, **ds)
    if page:
        a["k_cache"], a["v_cache"], a["page_table"] = paged(k, v, page)
    return a


def _zyfa_decode(dtype: str, page: int | None):
    def build(inp: Inputs):
        a = _cache_args(inp, dtype, page)
        return lambda: zyfa.flash_attn_with_kvcache(**a, softmax_scale=inp.scale, causal=inp.case.causal,
                                                    return_softmax_lse=True)
    return build


def _fa3_kvcache():
    """FlashAttention-3's flash_attn_with_kvcache: the fa3-fwd wheel's, else flash_attn_interface's."""
    try:
        import fa3_fwd_interface as fa3
        return fa3.flash_attn_with_kvcache
    except (ImportError, AttributeError):
        import flash_attn_interface as fa3
        return fa3.flash_attn_with_kvcache


_fa3_kvcache_missing = unimportable(_fa3_kvcache, "FlashAttention-3's flash_attn_with_kvcache (fa3-fwd)")


def _fa3_decode(dtype: str, page: int | None):
    def build(inp: Inputs):
        fa, a = _fa3_kvcache(), _cache_args(inp, dtype, page)
        return lambda: out_and_lse(fa(**a, softmax_scale=inp.scale, causal=inp.case.causal, return_softmax_lse=True))
    return build


def _copy(inp: Inputs):
    """The ceiling: the BF16 cache copied device to device (its GB/s counts the bytes read and
    written, what the memory moves)."""
    k, v = inp.k, inp.v
    dk, dv = torch.empty_like(k), torch.empty_like(v)

    def call():
        dk.copy_(k)
        dv.copy_(v)
        return None, None
    return call, lambda res: res


def decode_methods() -> list[Method]:
    zm = zyfa_missing("triton")
    out = [Method("zyfa", "triton", dtype, "head" if dtype == "fp8" else None, _zyfa_decode(dtype, page), zm,
                  decode=True, page_size=page) for page in (None, PAGE) for dtype in ("bf16", "fp8")]
    out += [Method("fa3", "fa3", dtype, "head" if dtype == "fp8" else None, _fa3_decode(dtype, page),
                   _fa3_kvcache_missing, decode=True, page_size=page) for page in (None, PAGE) for dtype in ("bf16", "fp8")]
    out.append(Method("copy", "torch", "bf16", None, _copy, gpu_missing, decode=True))
    return out
