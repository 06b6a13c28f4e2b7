"""What `zyfa bench --cases decode` times: zyfa's decode kernels (Triton's, BF16 and E4M3; the
Gluon E4M3 kernel on Hopper) on dense and paged caches, FlashAttention-3's
flash_attn_with_kvcache (BF16, FP8) and a device copy of the cache (the bandwidth ceiling). A case's cache is its k, v; the E4M3 cache, q and descales are
quantize_fp8's per-head ones, which zyfa and FA3 both read. And a mixed batch (decodes beside
prefill chunks) as separate calls, the anchor of zyfa's one varlen call there."""
from __future__ import annotations

import torch

import zyfa

from ..spec.shapes import cu_seqlens
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


def _zyfa_decode(dtype: str, page: int | None, backend: str):
    def build(inp: Inputs):
        a = _cache_args(inp, dtype, page)
        return lambda: zyfa.flash_attn_with_kvcache(**a, softmax_scale=inp.scale, causal=inp.case.causal,
                                                    return_softmax_lse=True, backend=backend)
    return build


def _gluon_unsupported(page: int | None):
    """Why the Gluon E4M3 decode kernel cannot take a case here (its backend's own reasons)."""
    def unsupported(case) -> str | None:
        from ..device import device_arch
        from ..dispatch import DecodeProblem
        from ..gluon_kernels.backend import supports_decode
        dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        ok, why = supports_decode(DecodeProblem(device=dev, arch=device_arch(dev), is_fp8=True,
                                                head_dims=(case.D, case.Dv), seqlen_q=case.Sq, paged=bool(page),
                                                rows=case.Hq // case.Hkv * case.Sq, fp8_dots=True))
        return None if ok else why
    return unsupported


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


def _zyfa_separate(dtype: str):
    """A mixed batch as separate calls, as an engine without zyfa's routing issues it: the
    decode sequences (1..16 queries, one count) in one flash_attn_with_kvcache call over a dense
    cache of their keys, the rest in one flash_attn_varlen_func call. The cache and the
    prefill tokens are gathered outside the timing; ``finish`` (untimed) writes the parts into
    the packed layout the error is taken on."""
    from ..decode_checks import MAX_QUERIES

    def build(inp: Inputs):
        a = inp.varlen_args(dtype == "fp8")
        q, k, v = a["q"], a["k"], a["v"]
        ql, kl = inp.case.query_lengths, inp.case.lengths
        cq, ck = cu_seqlens(ql), cu_seqlens(kl)
        dec = [i for i, n in enumerate(ql) if n <= MAX_QUERIES]
        pre = [i for i, n in enumerate(ql) if n > MAX_QUERIES]
        sq = ql[dec[0]]
        if any(ql[i] != sq for i in dec):
            raise ValueError("the separate decode call takes decode sequences of one query count")
        width = max(kl[i] for i in dec)
        k_dec, v_dec = (torch.zeros(len(dec), width, *x.shape[1:], dtype=x.dtype, device=x.device) for x in (k, v))
        for j, i in enumerate(dec):
            k_dec[j, :kl[i]], v_dec[j, :kl[i]] = k[ck[i]:ck[i] + kl[i]], v[ck[i]:ck[i] + kl[i]]
        q_dec = torch.stack([q[cq[i]:cq[i] + sq] for i in dec])
        lens = torch.tensor([kl[i] for i in dec], dtype=torch.int32, device=q.device)
        names = [n for n in ("q_descale", "k_descale", "v_descale") if n in a]
        ds_dec, ds_pre = ({n: a[n][rows] for n in names} for rows in (dec, pre))
        q_pre = torch.cat([q[cq[i]:cq[i] + ql[i]] for i in pre])
        k_pre, v_pre = (torch.cat([x[ck[i]:ck[i] + kl[i]] for i in pre]) for x in (k, v))
        cu_q, cu_k = (torch.tensor(cu_seqlens([ls[i] for i in pre]), dtype=torch.int32) for ls in (ql, kl))
        longest_q, longest_k = max(ql[i] for i in pre), max(kl[i] for i in pre)

        def call():
            d = zyfa.flash_attn_with_kvcache(q_dec, k_dec, v_dec, cache_seqlens=lens, softmax_scale=inp.scale,
                                             causal=inp.case.causal, return_softmax_lse=True, **ds_dec)
            p = zyfa.flash_attn_varlen_func(q_pre, k_pre, v_pre, cu_q, cu_k, longest_q, longest_k,
                                            softmax_scale=inp.scale, causal=inp.case.causal, return_lse=True,
                                            **ds_pre)
            return d, p

        def finish(res):
            (o_dec, l_dec), (o_pre, l_pre) = res
            out = torch.empty(cq[-1], *o_pre.shape[1:], dtype=o_pre.dtype, device=o_pre.device)
            lse = torch.empty(l_pre.shape[0], cq[-1], dtype=l_pre.dtype, device=l_pre.device)
            for j, i in enumerate(dec):
                out[cq[i]:cq[i] + sq], lse[:, cq[i]:cq[i] + sq] = o_dec[j], l_dec[j]
            r = 0
            for i in pre:
                out[cq[i]:cq[i] + ql[i]], lse[:, cq[i]:cq[i] + ql[i]] = o_pre[r:r + ql[i]], l_pre[:, r:r + ql[i]]
                r += ql[i]
            return out[None], lse[None]
        return call, finish
    return build


def decode_methods() -> list[Method]:
    zm = zyfa_missing("triton")
    out = [Method("zyfa", "triton", dtype, "head" if dtype == "fp8" else None, _zyfa_decode(dtype, page, "triton"),
                  zm, decode=True, page_size=page) for page in (None, PAGE) for dtype in ("bf16", "fp8")]
    out += [Method("zyfa", "gluon", "fp8", "head", _zyfa_decode("fp8", page, "gluon"), zm,
                   unsupported=_gluon_unsupported(page), decode=True, page_size=page) for page in (None, PAGE)]
    out += [Method("fa3", "fa3", dtype, "head" if dtype == "fp8" else None, _fa3_decode(dtype, page),
                   _fa3_kvcache_missing, decode=True, page_size=page) for page in (None, PAGE) for dtype in ("bf16", "fp8")]
    out.append(Method("copy", "torch", "bf16", None, _copy, gpu_missing, decode=True))
    out += [Method("zyfa", "separate", dtype, "head" if dtype == "fp8" else None, _zyfa_separate(dtype), zm,
                   varlen=True, mixed=True) for dtype in ("bf16", "fp8")]
    return out
