"""Branch fp8-packed-vt, to delete once measured: a packed FP8 batch's V^T for the generated
kernel as main builds it (a zero key appended by copying all of V, a gather, then the key
order by a second launch) against one gather with the key order folded in; the bytes equal;
then the varlen call beside FA3's, and a paged cache (pages of 64 and 128) read in place by
the Triton kernel or gathered for the generated one, one process.

    python bench/packed_vt_ab.py OUT.json
"""
import json, random, sys
import torch
import zyfa
from zyfa.bench.cases import VARLEN_LENGTHS
from zyfa.bench.measure import median_ms
from zyfa.device import to_device
from zyfa.hopper_vt import hopper_vt
from zyfa.triton_kernels.launch import packed_vt
from zyfa.varlen import paged_kv_cache
import fa3_fwd_interface as fa3

HQ, HKV, D = 32, 8, 128


def main_packed_vt(v, starts, lens):        # main's packed_vt (2026-12-01), then hopper_vt as attention_fp8 ran it
    padded = [n + (-n) % 16 for n in lens]
    v_starts = [0]
    for n in padded[:-1]:
        v_starts.append(v_starts[-1] + n)
    total, dev = sum(padded), v.device
    table = to_device([padded, v_starts, starts, lens], dev, torch.long)
    seq = torch.repeat_interleave(torch.arange(len(lens), device=dev), table[0], output_size=total)
    pos = torch.arange(total, device=dev) - table[1][seq]
    src = torch.where(pos < table[3][seq], table[2][seq] + pos, v.shape[0])
    u = v.view(torch.uint8).permute(1, 2, 0)
    u = torch.cat([u, u.new_zeros(*u.shape[:2], 1)], -1)
    vt = u.index_select(-1, src).view(v.dtype)[None].permute(0, 3, 1, 2)
    return hopper_vt(vt)[0]


rng = random.Random(0)
rows = []
for name, lens in {"bench varlen 16 seqs": list(VARLEN_LENGTHS),
                   "32 x 64..2048": [rng.randint(64, 2048) for _ in range(32)]}.items():
    n, mx = len(lens), max(lens)
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(sum(lens), HQ, D, device="cuda", generator=g).bfloat16()
    k, v = (torch.randn(sum(lens), HKV, D, device="cuda", generator=g).bfloat16() for _ in range(2))
    x = zyfa.quantize_fp8(q[None], k[None], v[None])
    starts = [0] + torch.tensor(lens).cumsum(0).tolist()[:-1]
    old = lambda: main_packed_vt(x.v[0], starts, lens)
    new = lambda: packed_vt(x.v[0], starts, lens, key_order=True)[0][0].view(torch.uint8).permute(1, 2, 0)
    same = torch.equal(old(), new())
    t_old, t_new = median_ms(old), median_ms(new)
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)
    cud = cu.cuda()
    ds = {f"{t}_descale": getattr(x, f"{t}_descale").expand(n, -1).contiguous() for t in "qkv"}
    flops = sum(2 * HQ * (m * (m + 1) // 2) * 2 * D for m in lens)
    v8 = x.v[0].contiguous()
    zy = flops / median_ms(lambda: zyfa.flash_attn_varlen_func(x.q[0], x.k[0], x.v[0], cu, cu, mx, mx,
                                                               backend="ptx", **ds)) / 1e9
    fa = flops / median_ms(lambda: fa3.flash_attn_varlen_func(x.q[0], x.k[0], v8, cud, cud, mx, mx, causal=True,
                                                               **ds)) / 1e9
    paged = {}
    for page in (64, 128):
        kp, vp, table, used = paged_kv_cache(x.k[0], x.v[0], cud, page, seed=page)
        table, used = table.cpu(), used.cpu()
        for backend in ("triton", "ptx"):       # pages read in place / gathered into a packed batch
            if backend == "triton" and page < 128:
                continue
            paged[f"paged {page} {backend}"] = flops / median_ms(lambda: zyfa.flash_attn_varlen_func(
                x.q[0], kp, vp, cu, None, mx, mx, block_table=table, seqused_k=used, backend=backend, **ds)) / 1e9
    rows.append(dict(batch=name, vt_main_us=t_old * 1e3, vt_new_us=t_new * 1e3, bytes_equal=same,
                     zyfa_ptx_fp8=zy, fa3_fp8=fa, **paged))
    print(f"{name:22s} V^T main {t_old * 1e3:6.0f} us, folded {t_new * 1e3:6.0f} us, bytes equal {same} | "
          f"zyfa ptx FP8 varlen {zy:.0f} TFLOP/s, FA3 {fa:.0f} ({zy / fa:.3f}) | "
          + ", ".join(f"{k_} {v_:.0f}" for k_, v_ in paged.items()), flush=True)
json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), open(sys.argv[1], "w"), indent=1)
