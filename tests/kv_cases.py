"""Shared pieces of the decode tests: KV caches (dense with NaN past each sequence's end, paged
as a shuffled pool), E4M3 codes from integer bits (exact under the interpreter)."""
import torch

from conftest import DEVICE

E4M3 = torch.float8_e4m3fn


def _t(vals):
    return torch.tensor(vals, dtype=torch.int32, device=DEVICE)


def _randn(*shape, gen, dtype=torch.bfloat16):
    return torch.randn(*shape, generator=gen).to(dtype).to(DEVICE)


def _e4m3(x, gen):
    """Random E4M3 codes of x's shape built from integer bits (exact under the interpreter):
    any finite code, magnitudes up to 2^4 (exponent fields 0..10)."""
    sign = torch.randint(0, 2, x.shape, generator=gen) << 7
    exp = torch.randint(0, 11, x.shape, generator=gen) << 3
    man = torch.randint(0, 8, x.shape, generator=gen)
    return (sign | exp | man).to(torch.uint8).view(E4M3).to(DEVICE)


def _cache(B, cap, Hkv, D, lens, dtype, gen):
    """A dense cache (B, cap, Hkv, D) whose rows past each sequence's length hold NaN: a kernel
    that reads past cache_seqlens turns its output NaN."""
    k, v = (_randn(B, cap, Hkv, D, gen=gen, dtype=torch.float32) for _ in range(2))
    if dtype == E4M3:
        k, v = _e4m3(k, gen), _e4m3(v, gen)
    else:
        k, v = k.to(dtype), v.to(dtype)
    for b, n in enumerate(lens):
        _bytes(k)[b, n:] = _bytes(_nan(k.dtype))
        _bytes(v)[b, n:] = _bytes(_nan(v.dtype))
    return k, v


def _nan(dtype):
    if dtype == E4M3:
        return torch.tensor(0x7F, dtype=torch.uint8).view(E4M3)
    return torch.tensor(float("nan"), dtype=dtype)


def _bytes(x):
    """x's elements as integers of their width (assignment works for every dtype so)."""
    return x.view(torch.uint8 if x.element_size() == 1 else torch.int16)


def _paged(k, v, lens, page, gen, extra_cols=1):
    """The dense cache's used rows as a shuffled pool of pages (two spare, every unused row
    NaN) and its block table (padded by out-of-range page numbers, which must not be read)."""
    B, _, Hkv, D = k.shape
    counts = [-(-n // page) for n in lens]
    pool = sum(counts) + 2
    order = torch.randperm(pool, generator=gen).tolist()
    kp = torch.empty((pool, page, Hkv, D), dtype=k.dtype, device=DEVICE)
    _bytes(kp)[:] = _bytes(_nan(k.dtype).to(DEVICE))
    vp = kp.clone()
    table = torch.full((B, max(counts) + extra_cols), 10 ** 6, dtype=torch.int32)
    fill_pages((kp, vp), [lambda b, lo, hi, x=x: _bytes(x)[b, lo:hi] for x in (k, v)], table, order, lens, page)
    return kp, vp, table.to(DEVICE)


def fill_pages(pools, sources, table, order, lens, page):
    """Sequence b's rows into pool pages taken in ``order``, its page numbers into table row b:
    ``sources`` gives each pool's rows [lo, hi) of sequence b as bytes."""
    used = 0
    for b, n in enumerate(lens):
        for j in range(-(-n // page)):
            p = order[used]
            used += 1
            table[b, j] = p
            rows = min(page, n - j * page)
            for pool, rows_of in zip(pools, sources):
                _bytes(pool)[p, :rows] = rows_of(b, j * page, j * page + rows)



def fp8_case(B, Sq, Hq, Hkv, D, lens, page, q_e4m3, seed):
    """An E4M3 cache (dense, or paged when ``page``) with per-(sequence, kv head) k and v descales,
    and q: BF16, or E4M3 with its own descales (``q_e4m3``). Returns (q, k, v, table, descales)."""
    gen = torch.Generator().manual_seed(seed)
    kc, vc = _cache(B, max(lens) + 3, Hkv, D, lens, E4M3, gen)
    kd, vd = (torch.rand(B, Hkv, generator=gen).to(DEVICE) * 0.1 + 0.01 for _ in range(2))
    q = _randn(B, Sq, Hq, D, gen=gen) * 3
    kw = {"k_descale": kd, "v_descale": vd}
    if q_e4m3:
        q = _e4m3(q, gen)
        kw["q_descale"] = torch.rand(B, Hkv, generator=gen).to(DEVICE) * 0.1 + 0.01
    table = None
    if page:
        kc, vc, table = _paged(kc, vc, lens, page, gen)
    return q, kc, vc, table, kw
