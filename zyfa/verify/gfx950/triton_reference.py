"""Small Triton kernels whose gfx950 compilation validates the emulator: Triton's own code
for the target, run instruction by instruction, must give what the kernel means.

    python -m zyfa.verify.gfx950.triton_reference NAME     (prints Triton's AMDGCN for NAME)

Compiling needs Triton's JIT, not its interpreter: with TRITON_INTERPRET=1 set (the CPU
tests), run this module in a process without it, as tests/gfx950/test_gfx950.py does.
"""
from __future__ import annotations

import sys

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget

from ...triton_kernels.p_rules import P_RULE_IDS, lean_p_bits


@triton.jit
def p_codes(Y, OUT, n, RULE: tl.constexpr, BLOCK: tl.constexpr):
    """OUT[i] = the E4M3 code of 2^(Y[i] + 8) under a lean rule (int32)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    y = tl.load(Y + offs, mask=m, other=0.0)
    tl.store(OUT + offs, lean_p_bits(y, RULE), mask=m)


@triton.jit
def colsum(X, OUT, rows, cols, scale, BLOCK: tl.constexpr):
    """OUT[c] = sum over rows of X[r, c] * scale, as sequential float32 FMAs."""
    c = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = c < cols
    acc = tl.zeros([BLOCK], tl.float32)
    for r in range(0, rows):
        acc = tl.fma(tl.load(X + r * cols + c, mask=m, other=0.0), scale, acc)
    tl.store(OUT + c, acc, mask=m)


@triton.jit
def dot_fp8(A, B, C, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    """C (M x N, float32) = A (M x K) @ B (K x N), E4M3 inputs (one v_mfma_f32_32x32x64_f8f6f4
    at 32 x 32 x 64, with Triton's LDS swizzles and byte packing around it)."""
    m, n, k = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(A + m[:, None] * K + k[None, :])
    b = tl.load(B + k[:, None] * N + n[None, :])
    tl.store(C + m[:, None] * N + n[None, :], tl.dot(a, b))


@triton.jit
def dot_scaled_fp8(A, A_SCALE, B, B_SCALE, C, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    """C (M x N, float32) = (A 2^(A_SCALE - 127)) @ (B 2^(B_SCALE - 127)), E4M3 inputs with an
    E8M0 scale per row of A (column of B) per 32 k. On gfx950 with 4 warps this is
    v_mfma_scale_f32_32x32x64_f8f6f4 with the scale bytes picked by op_sel/op_sel_hi, and B
    (row-major, k by n) read from LDS with ds_read_b64_tr_b8."""
    m, n, k, kb = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K), tl.arange(0, K // 32)
    a = tl.load(A + m[:, None] * K + k[None, :])
    b = tl.load(B + k[:, None] * N + n[None, :])
    a_scale = tl.load(A_SCALE + m[:, None] * (K // 32) + kb[None, :])
    b_scale = tl.load(B_SCALE + n[:, None] * (K // 32) + kb[None, :])
    tl.store(C + m[:, None] * N + n[None, :], tl.dot_scaled(a, a_scale, "e4m3", b, b_scale, "e4m3"))


def _specs():
    out = {f"p_codes_{rule}": (p_codes, {"Y": "*fp32", "OUT": "*i32", "n": "i32", "RULE": "constexpr",
                                         "BLOCK": "constexpr"}, {"RULE": P_RULE_IDS[rule], "BLOCK": 256}, 4)
           for rule in ("lean", "lean_quad", "lean_cubic")}
    out["dot_fp8"] = (dot_fp8, {"A": "*fp8e4nv", "B": "*fp8e4nv", "C": "*fp32", "M": "constexpr", "N": "constexpr",
                                "K": "constexpr"}, {"M": 32, "N": 32, "K": 64}, 1)
    out["dot_scaled_fp8"] = (dot_scaled_fp8, {"A": "*fp8e4nv", "A_SCALE": "*u8", "B": "*fp8e4nv", "B_SCALE": "*u8",
                                              "C": "*fp32", "M": "constexpr", "N": "constexpr", "K": "constexpr"},
                             {"M": 128, "N": 64, "K": 256}, 4)
    out["colsum"] = (colsum, {"X": "*fp32", "OUT": "*fp32", "rows": "i32", "cols": "i32", "scale": "fp32",
                              "BLOCK": "constexpr"}, {"BLOCK": 128}, 2)
    return out


# zyfa's own Triton FP8 attention kernel at a small tile (zyfa.verify.triton_compile)
ATTENTION = dict(fp8=True, p_rule="lean_cubic", block_m=64, block_n=64, num_warps=4, num_stages=1,
                 head_dim=64, head_dim_v=64)


def compile_gfx950(name: str) -> str:
    if name == "attention_fp8":
        from ..triton_compile import compile_attention
        return compile_attention("gfx950", **ATTENTION).asm["amdgcn"]
    fn, signature, constexprs, num_warps = _specs()[name]
    src = triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=constexprs)
    k = triton.compile(src, target=GPUTarget("hip", "gfx950", 64), options={"num_warps": num_warps})
    return k.asm["amdgcn"]


def emulate_triton_attention(text: str, q, k, v, q_descale, k_descale, v_descale, causal: bool = True):
    """Run Triton's gfx950 compilation of zyfa's FP8 attention kernel (``ATTENTION``'s tile,
    causal, block references, per-head descales; compiled by ``compile_gfx950("attention_fp8")``)
    in the emulator on FlashAttention-layout FP8 CPU tensors, with the kernel arguments Triton's
    HIP launcher would pass (each tensor descriptor as base, shape, strides, padding, shape,
    strides). Returns (out bfloat16 (B, Sq, Hq, Dv), lse float32 (B, Hq, Sq))."""
    import math

    import numpy as np
    import torch

    from ...asm.gfx950.loader import kernel_args, pack
    from ...spec.constants import LOG2E
    from ...spec.descales import coarse_descale, is_per_token, per_channel_v_descale
    from . import emulator as E
    if not causal:
        raise ValueError("the compiled kernel is the causal one")
    B, Sq, Hq, D = q.shape
    Sk, Hkv, Dv = k.shape[1], k.shape[2], v.shape[-1]
    bm = ATTENTION["block_m"]
    if (D, Dv) != (ATTENTION["head_dim"], ATTENTION["head_dim_v"]):
        raise ValueError(f"the compiled kernel takes head dims {ATTENTION['head_dim']}, got {D}")
    if is_per_token(q_descale) or is_per_token(k_descale):
        raise ValueError("the compiled kernel takes per-head descales")
    vt = v.permute(0, 2, 3, 1)           # (B, Hkv, Dv, Sk): the launcher's V^T, made contiguous by desc()
    qd, kd = (coarse_descale(d, B, Hkv, name) for d, name in ((q_descale, "q_descale"), (k_descale, "k_descale")))
    vd = per_channel_v_descale(v_descale, B, Hkv, Dv)
    mem = E.Memory()

    def desc(t):
        t = t.contiguous()
        ptr = mem.alloc(t.view(torch.uint8 if t.element_size() == 1 else torch.int16).numpy())
        shape, strides = list(t.shape), list(t.stride())
        return [ptr, *shape, *strides, 0, *shape, *strides]

    o_desc = desc(torch.zeros(B, Sq, Hq, Dv, dtype=torch.bfloat16))
    lse_ptr = mem.alloc(np.zeros(B * Hq * Sq, np.float32))
    args = (desc(q) * 2 + desc(k) * 2 + desc(vt) + o_desc
            + [lse_ptr, mem.alloc(qd.float().contiguous().numpy()),
               mem.alloc(kd.float().contiguous().numpy()), mem.alloc(vd.float().contiguous().numpy()),
               Sq, Sk, Hq, Hkv, float(1.0 / math.sqrt(D) * LOG2E),
               # the packed-batch arguments (O, CU_Q, K_START, K_LEN, V_START, strides, block table
               # and its stride) and the window's (left, right), unused here
               lse_ptr, lse_ptr, lse_ptr, lse_ptr, lse_ptr, Hq * Dv, Sq, lse_ptr, 0, 0, 0, 0, 0])
    kernel = E.parse(text)
    E.launch(kernel, mem, (-(-Sq // bm), B * Hq), 64 * ATTENTION["num_warps"],
             pack(*kernel_args(text, kernel.name), args))
    out = torch.from_numpy(mem.array(o_desc[0], np.int16, B * Sq * Hq * Dv)).view(torch.bfloat16)
    lse = torch.from_numpy(mem.array(lse_ptr, np.float32, B * Hq * Sq))
    return out.reshape(B, Sq, Hq, Dv), lse.reshape(B, Hq, Sq)


if __name__ == "__main__":
    sys.stdout.write(compile_gfx950(sys.argv[1]))
