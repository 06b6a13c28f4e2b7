import torch, zyfa
from zyfa.activations import make
from zyfa.spec.reference import attention_fp64
from zyfa.bench.measure import rel_err
for (name, Hq, Hkv, D, Dv) in [("d128 GQA", 8, 2, 128, 128), ("MLA 192/128", 4, 4, 192, 128)]:
    q, k, v = make("realistic", 1, 2048, Hq, Hkv, D, Dv, seed=1)
    ref = attention_fp64(q, k, v, causal=True)
    x = zyfa.quantize_int8_qk(q, k, v)
    vd = x.v.double() * x.v_descale.double()[:, None, :, None]        # (B, Sk, Hkv, Dv) dequantized
    e_v = rel_err(attention_fp64(q, k, vd, causal=True), ref)
    e_all = rel_err(zyfa.flash_attn_func(causal=True, **x.kwargs(), backend="reference"), ref)
    print(f"{name}: V's E4M3 alone {e_v:.3e}, INT8 mode {e_all:.3e} ({e_v / e_all:.2f} of it)", flush=True)
