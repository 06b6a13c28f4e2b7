"""FP8 generated kernel through flash_attn_func: V^T's key order written by PyTorch (the spec's
hopper_vt) vs the Triton kernel, beside FA3 FP8; and each V^T rewrite alone."""
import json, sys
import torch
import zyfa
from zyfa.activations import make
from zyfa.asm.ptx import kernels as K
from zyfa.spec.key_order import hopper_vt as torch_vt
from zyfa.hopper_vt import hopper_vt as triton_vt
from zyfa.bench.cases import attention_flops
from zyfa.bench.measure import median_ms
import fa3_fwd_interface as fa3
import zyfa.hopper_vt as HV

SHAPES = [("batch 4 4K", 4, 4096, 32, 32), ("d128 1K", 32, 1024, 16, 16), ("d128 4K", 8, 4096, 16, 16),
          ("Mistral 16K", 1, 16384, 32, 8), ("32 heads 32K", 1, 32768, 32, 32)]
rows = []
for name, B, S, Hq, Hkv in SHAPES:
    q, k, v = (t.bfloat16() for t in make("realistic", B, S, Hq, Hkv, 128, seed=0, device="cuda"))
    x = zyfa.quantize_fp8(q, k, v)
    flops = attention_flops(B, Hq, S, S, 128, 128, True)
    outs, line = {}, [f"{name:14s}"]
    for label, vt, tile in (("torch vt", torch_vt, None), ("triton 64x128", triton_vt, (64, 128)),
                            ("triton 128x128", triton_vt, (128, 128)), ("triton 64x256", triton_vt, (64, 256))):
        K.hopper_vt = vt
        if tile:
            HV.BLOCK_D, HV.BLOCK_K = tile
        fn = lambda: zyfa.flash_attn_func(**x.kwargs(), causal=True, return_lse=True, backend="ptx")
        outs[label] = fn()[0]
        ms = median_ms(fn)
        copy_ms = median_ms(lambda: vt(x.v))
        rows.append(dict(case=name, label=label, ms=ms, tflops=flops / ms / 1e9, vt_ms=copy_ms))
        line.append(f"{label}={flops / ms / 1e9:.0f} ({copy_ms * 1e3:.0f} us, {2 * x.v.numel() / copy_ms / 1e6:.0f} GB/s)")
    v8 = x.v.contiguous()
    ms = median_ms(lambda: fa3.flash_attn_func(x.q, x.k, v8, causal=True, q_descale=x.q_descale,
                                               k_descale=x.k_descale, v_descale=x.v_descale))
    line.append(f"fa3={flops / ms / 1e9:.0f}; outputs equal: {all(torch.equal(outs['torch vt'], o) for o in outs.values())}")
    rows.append(dict(case=name, label="fa3", ms=ms, tflops=flops / ms / 1e9))
    print(" | ".join(line), flush=True)
    torch.cuda.empty_cache()
json.dump(rows, open(sys.argv[1], "w"), indent=1)
