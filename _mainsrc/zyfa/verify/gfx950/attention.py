"""The generated gfx950 attention kernel (zyfa.asm.gfx950.attention) run in the emulator, on
FlashAttention-layout tensors: what the tests compare against the spec."""
from __future__ import annotations

import numpy as np
import torch

from ...asm.gfx950.attention import WAVES, attention_kernel, grid, launch_args
from ...asm.gfx950.loader import kernel_args, pack
from . import emulator as E


def emulate_attention(q, k, v, q_descale, k_descale, v_descale, causal=True, p_rule="lean_cubic",
                      softmax_scale=None, ref_rule="block"):
    """Run the generated gfx950 kernel in the emulator on FlashAttention-layout FP8 tensors
    (per-head descales, GQA allowed), one launch for every head. Returns (out float32
    (B, Sq, Hq, Dv), lse float32 (B, Hq, Sq)). Slow: it is a CPU emulation, for checks."""
    B, Sq, Hq, D = q.shape
    Sk, Hkv, Dv = k.shape[1], k.shape[2], v.shape[-1]
    t = launch_args(q, k, v, q_descale, k_descale, v_descale, softmax_scale, q.device)
    name, text = attention_kernel(p_rule, causal, D, Dv, ref_rule)
    kernel, (args, size) = E.parse(text, name), kernel_args(text, name)
    mem = E.Memory()
    ptrs = {key: mem.alloc(value.numpy()) for key, value in t.items()}
    po, pl = mem.alloc(np.zeros((B, Sq, Hq, Dv), np.float32)), mem.alloc(np.zeros((B, Hq, Sq), np.float32))
    values = [ptrs["q"], ptrs["k"], ptrs["vt"], ptrs["vd"], po, pl, ptrs["fac"], ptrs["kv_head"], Sq, Sk, Hq, Hkv]
    E.launch(kernel, mem, grid(q), 64 * WAVES, pack(args, size, values))
    out = torch.from_numpy(mem.array(po, np.float32, B * Sq * Hq * Dv).reshape(B, Sq, Hq, Dv))
    lse = torch.from_numpy(mem.array(pl, np.float32, B * Hq * Sq).reshape(B, Hq, Sq))
    return out, lse
