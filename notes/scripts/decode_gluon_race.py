"""Run 59 part (session q): the Gluon E4M3 decode kernel (notes/ab/gluon_decode's diff applied)
on shapes small enough for compute-sanitizer's racecheck: dense and paged (16, 64), E4M3 and
BF16 q, one and three splits, two causal queries; each output against float64 within the GPU
tests' bound, and printed.

    compute-sanitizer --tool racecheck python3 notes/scripts/decode_gluon_race.py
"""
import sys

import torch

import zyfa
from zyfa.spec.kv_cache import decode_attention_fp64

sys.path.insert(0, "tests")
from kv_cases import E4M3, _cache, _e4m3, _paged, _randn, _t  # noqa: E402

bad = 0
for page in (0, 16, 64):
    for q_e4m3 in (True, False):
        for splits in (1, 3):
            gen = torch.Generator().manual_seed(page + splits)
            lens = [5, 700]
            kc, vc = _cache(2, 704, 2, 128, lens, E4M3, gen)
            kw = {n: torch.rand(2, 2, generator=gen).cuda() * 0.1 + 0.01 for n in ("k_descale", "v_descale")}
            q = _randn(2, 2, 8, 128, gen=gen) * 3
            if q_e4m3:
                q = _e4m3(q, gen)
                kw["q_descale"] = torch.rand(2, 2, generator=gen).cuda() * 0.1 + 0.01
            table = None
            if page:
                kc, vc, table = _paged(kc, vc, lens, page, gen)
            out = zyfa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=_t(lens), page_table=table, causal=True,
                                               num_splits=splits, backend="gluon", **kw)
            ref, _ = decode_attention_fp64(q, kc, vc, lens, table, causal=True, **kw)
            err = ((out.double() - ref).norm() / ref.norm()).item()
            ok = err < 5e-2 and bool(torch.isfinite(out).all())
            bad += not ok
            print(f"page {page} e4m3 q {q_e4m3} splits {splits}: err {err:.2e} {'ok' if ok else 'WRONG'}", flush=True)
print("FAILED" if bad else "all passed", bad)
sys.exit(1 if bad else 0)
