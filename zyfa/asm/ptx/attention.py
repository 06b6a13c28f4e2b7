"""The generated FP8 prefill attention kernel for sm_90a (head dims 128/128 and MLA's
192/128): the whole algorithm of ``zyfa.spec.reference.fp8_attention_spec``. This module is the
entry point (attention_kernel); the head dims pick the schedule (layout.layout_for):
serial.py (one warpgroup a CTA) for Dqk 128, specialized.py (a producer warpgroup and two
consumers) for Dqk 192 and for 16-bit inputs (attention_kernel_16, whose block step is bf16.py's).

  layout.py     tile sizes, the shared-memory layout, kernel names and parameters
  cta.py        what a CTA knows (typed records) and the prologue that sets it up
  loads.py      the K / V^T stage ring, TMA loads, mbarrier setup
  scores.py     S = Q K^T, the masks, row maxima
  softmax.py    a block's references, P codes and row sums
  block.py      one key block put together: P V^T and the accumulation
  window.py     a sliding window's key-block range and masks
  epilogue.py   out and LSE
  lean_p.py     the P rules' instructions; fragments.py the wgmma fragments P moves through

V^T arrives with its keys permuted inside each 16-key group (zyfa.spec.key_order.KEY_OF_SLOT) so P
goes from the QK^T accumulator to the A operand without moving between threads. Why each head
dim runs the schedule it does: layout.layout_for and docs/hopper.md.
"""
from __future__ import annotations

import dataclasses

# the kernel's public face: callers and tests read the layout's names here too
from .layout import (  # noqa: F401
    BLOCK_M,
    BLOCK_N,
    COLUMN_TILE,
    HEAD_DIM,
    HEAD_DIMS,
    HEAD_DIMS_16,
    LONG_KEYS,
    OUT_REGS,
    WIDE_KEYS,
    PARAMS,
    REF_RULES,
    REGISTER_BUDGET,
    REGISTER_CAP_D64,
    TAIL,
    fp8_dv,
    kernel_name,
    kernel_name_16,
    key_block,
    layout_for,
    long_keys,
    params_for,
    wide_blocks,
)
from .lean_p import HMMA_RULES, PTX_RULES  # noqa: F401
from .serial import emit_serial
from .specialized import LAUNCH_REGISTERS, emit_specialized
from .target import module, program

# the lean and half rules, bit-exact to the spec, and exact (MUFU.EX2 + the hardware's E4M3
# rounding: the spec's codes but within MUFU's error of a rounding midpoint)
ATTENTION_RULES = PTX_RULES + ("exact",)


def attention_kernel(rule: str = "lean_cubic", causal: bool = True, dqk: int = HEAD_DIM,
                     arch: str = "sm_90a", packed: bool = False, int8_qk: bool = False,
                     long: bool = False, ref_rule: str = "block", window: bool = False,
                     slot_keys: bool = False) -> tuple[str, str]:
    """(name, PTX) of the FP8 attention kernel (Dqk ``dqk`` and its Dv: HEAD_DIMS) for one P
    rule and mask kind. The row sums of the rounded P come from half-precision wgmmas for the
    rules in HMMA_RULES and from the ALUs for the others (softmax.py).

    Parameters: TMA maps of q (B, Sq, Hq, Dqk) and k (B, Sk, Hkv, Dqk) with boxes of 64 and
    128 rows of 128 columns (Dqk 256: two such tiles a row), of V^T (B * Hkv, Dv, Sk padded
    to 16) with keys permuted per 16-key group and boxes of Dv x 128, and (Dqk 192) of q and
    k's columns 128.. in boxes of 64 bytes; out (B, Sq, Hq, Dv) BF16; lse (B, Hq, Sq) float32;
    fac (B, Hkv) float32 = q_descale * k_descale * softmax_scale * log2(e); v_descale (B, Hkv,
    Dv) float32; seqlen_q, seqlen_k, heads, kv_heads, batch. Launch: layout_for(dqk, dv=Dv)'s
    threads and shared_bytes of dynamic shared memory; grid (ceil(Sq / 64), B * Hq) for
    Dqk 64 and 128, (ceil(Sq / 128) * B * Hq,) otherwise (and for ``long``: d128 in the
    specialized schedule, layout.long_keys). ``int8_qk``: q and k int8, any of
    the head dims (layout.INT8_PARAMS: fac is then a factor a query row, kfac k's descale a block).
    ``ref_rule`` "running" (E4M3 only): the running-max reference, P V^T accumulated in place.
    ``window``: a sliding window (window.py), its bounds the parameters layout.WINDOW_PARAMS
    (``causal`` then unused: the host passes right 0); a kernel of its own name.
    ``slot_keys`` (dense only; kernels._slot_rows says which calls take it): k's map is the 5-d
    view of zyfa.spec.key_order.slot_order_rows and V^T is in the natural key order: the
    accumulator's columns then hold keys in P's slot order.
    """
    if rule not in ATTENTION_RULES:
        raise ValueError(f"the generated kernel implements the P rules {ATTENTION_RULES}, got {rule!r}")
    if ref_rule not in REF_RULES or (int8_qk and ref_rule != "block"):
        raise ValueError(f"the generated kernel implements ref_rule {REF_RULES} (INT8 Q.K^T: 'block'), "
                         f"got {ref_rule!r}")
    running = ref_rule == "running"
    dv = fp8_dv(dqk)
    layout = dataclasses.replace(layout_for(dqk, dv=dv, packed=packed, int8_qk=int8_qk, long=long,
                                            wide=wide_blocks(rule, ref_rule, window)), window=window,
                                 slot_keys=slot_keys)
    if slot_keys and packed:
        raise ValueError("K rows in slot order take a dense batch (a packed batch's sequences start at any key)")
    name = kernel_name(rule, causal, dqk, packed, int8_qk, long, ref_rule, window, slot_keys)
    prog = program()
    shared = [".extern .shared .align 1024 .b8 zyfa_smem[];"]
    if layout.specialized:
        emit_specialized(prog, rule, causal, layout, running)
        return name, module(name, params_for(layout), prog, arch, shared, f".maxnreg {LAUNCH_REGISTERS[layout.consumers]}")
    emit_serial(prog, rule, causal, layout, running)
    # d64: four CTAs an SM; d128: three (the two copies of the block loop took up to 231 unbounded)
    cap = f".maxnreg {REGISTER_CAP_D64 if dqk < HEAD_DIM else REGISTER_BUDGET}"
    return name, module(name, params_for(layout), prog, arch, shared, cap)


def attention_kernel_16(dtype: str = "bf16", causal: bool = True, dqk: int = HEAD_DIM, dv: int = HEAD_DIM,
                        arch: str = "sm_90a", packed: bool = False, window: bool = False) -> tuple[str, str]:
    """(name, PTX) of the 16-bit attention kernel (``dtype`` "bf16" or "f16"; head dims in
    HEAD_DIMS_16), FlashAttention's online softmax (bf16.py). Parameters as attention_kernel's,
    read as bytes: maps of q (B, Sq, Hq, 2 Dqk), k and v (B, Sk, Hkv, 2 D) with boxes of 64 / 128
    rows of 128 bytes; out (B, Sq, Hq, Dv) in the input type; lse (B, Hq, Sq) float32; fac (B,
    Hkv) float32 = softmax_scale * log2(e); vd_ptr and the tail maps unused. Launch:
    layout_for(dqk, dtype, dv)'s threads and shared_bytes; grid (ceil(Sq / 128) * B * Hq,). ``window``:
    as attention_kernel's."""
    if (dqk, dv) not in HEAD_DIMS_16:
        raise ValueError(f"the generated 16-bit kernel takes head dims {HEAD_DIMS_16}, got ({dqk}, {dv})")
    if dtype not in ("bf16", "f16"):
        raise ValueError(f"the generated 16-bit kernel takes bf16 or f16, got {dtype!r}")
    layout = dataclasses.replace(layout_for(dqk, dtype, dv, packed), window=window)
    name = kernel_name_16(dtype, causal, dqk, dv, packed, window)
    prog = program()
    shared = [".extern .shared .align 1024 .b8 zyfa_smem[];"]
    emit_specialized(prog, None, causal, layout)
    return name, module(name, params_for(layout), prog, arch, shared, f".maxnreg {LAUNCH_REGISTERS[layout.consumers]}")
