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


def assert_same_up_to_key_tiles(out, lse, ref_out, ref_lse, head_dim, page_size, v_max, fp8_dot=False):
    """A paged decode equals the dense one bit for bit where both read the same key tiles; on a
    GPU, pages shorter than the dense tile get a shorter tile (decode_launch.default_tile): the
    running max then moves at other keys, so P is rounded (BF16; E4M3 with ``fp8_dot``) against
    other maxima and the float32 sums run in another order. Each P moves by at most one step of
    its type (2^-8 / 2^-4 of it), so the normalized output by at most that of the largest |v|
    (``v_max``), plus one BF16 step of its own; the LSE within float32 ordering."""
    from zyfa.triton_kernels.decode_launch import default_tile
    if default_tile(head_dim, page_size, fp8_dot) == default_tile(head_dim, 0, fp8_dot):
        assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)
        return
    o, r = out.double(), ref_out.double()
    p_step = 2.0 ** -4 if fp8_dot else 2.0 ** -8
    bound = 2.0 ** -7 * r.abs() + p_step * v_max + 2.0 ** -126
    assert ((o - r).abs() <= bound).all(), f"paged vs dense beyond P's step: {((o - r).abs() / bound).max():.2f}x"
    assert (lse.double() - ref_lse.double()).abs().max() < 1e-5
