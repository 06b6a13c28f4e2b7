"""Compile the attention kernel for a GPU target without a GPU (CI checks, inspection).

    python -m zyfa.verify.triton_compile sm90 | gfx950
"""
from __future__ import annotations

import re

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from ..asm.ptx.assemble import assemble, sass

from ..triton_kernels.attention import attention_fwd_kernel
from ..triton_kernels.p_rules import P_RULE_IDS

TARGETS = {"sm90": GPUTarget("cuda", 90, 32), "gfx950": GPUTarget("hip", "gfx950", 64)}


def compile_attention(target: str = "sm90", fp8: bool = True, p_rule: str = "lean_cubic",
                      block_m: int = 128, block_n: int = 128, num_warps: int = 8, num_stages: int = 2,
                      head_dim: int = 128, head_dim_v: int = 128, per_token: bool = False,
                      hw_round: bool = False, wgmma_key_order: bool = False, varlen: bool = False, page: int = 0,
                      qk_int8: bool = False, window: bool = False):
    el = "fp8e4nv" if fp8 else "bf16"
    qk_el = "i8" if qk_int8 else el
    d_main, d_tail = (128, 64) if head_dim == 192 else (head_dim, 0)

    def desc(dtype, block):
        return f"tensordesc<{dtype}[{', '.join(str(b) for b in block)}]>"

    sig = {"q_desc": desc(qk_el, [1, block_m, 1, d_main]),
           "q_tail_desc": desc(qk_el, [1, block_m, 1, d_tail or d_main]),
           "k_desc": desc(qk_el, [1, block_n, 1, d_main]),
           "k_tail_desc": desc(qk_el, [1, block_n, 1, d_tail or d_main]),
           "v_desc": desc(el, [1, 1, head_dim_v, block_n] if fp8 else [1, block_n, 1, head_dim_v]),
           "o_desc": desc("bf16", [1, block_m, 1, head_dim_v]),
           "LSE": "*fp32", "QD": "*fp32", "KD": "*fp32", "VD": "*fp32",
           "Sq": "i32", "Sk": "i32", "Hq": "i32", "Hkv": "i32", "qk_scale_log2": "fp32",
           "O": "*bf16", "CU_Q": "*i32", "K_START": "*i32", "K_LEN": "*i32", "V_START": "*i32", "o_row_stride": "i32",
           "lse_head_stride": "i32", "BLOCK_TABLE": "*i32", "block_table_stride": "i32",
           "win_left": "i32", "win_right": "i32"}
    consts = dict(IS_FP8=fp8, PER_TOKEN_QK=per_token, P_RULE=P_RULE_IDS[p_rule], REF_RULE=0, CAUSAL=True,
                  D=d_main, D_TAIL=d_tail, DV=head_dim_v, BLOCK_M=block_m, BLOCK_N=block_n, UPCAST_DOT=False,
                  HW_ROUND=hw_round, WGMMA_KEY_ORDER=wgmma_key_order, VARLEN=varlen, PAGE=page, QK_INT8=qk_int8,
                  WINDOW=window)
    for k in consts:
        sig[k] = "constexpr"
    src = ASTSource(attention_fwd_kernel, sig, consts, {})
    opts = {"num_warps": num_warps, "num_stages": num_stages}
    return triton.compile(src, target=TARGETS[target], options=opts)


def compile_quantizer(target: str = "sm90", mode: int = 2, hadamard: bool = True, smooth: bool = False,
                      group: int = 4, block_d: int = 128, block_dv: int = 128, per_tensor: bool = False):
    """The fused quantizer (zyfa.triton_kernels.quantize) compiled for a GPU target: mode 0
    smooth_k's channel sums and v's amax (``_sums_pass``), 1 the finite amax and 2 rotate /
    scale / round / write (``_quant_qkv``, q, k and v in one launch)."""
    from ..triton_kernels.quantize import BLOCK_S, _quant_qkv, _sums_pass, sum_rows, tile_rows
    if mode == 0:
        sig = {"k_ptr": "*bf16", "v_ptr": "*bf16", "sums_ptr": "*fp64", "v_amax": "*i32", "dummy": "*fp32",
               **{name: "i32" for name in ("Sk", "D", "Dv", "ksb", "kss", "ksh", "ksd", "vsb", "vss", "vsh", "vsd",
                                           "HKV", "NCHUNK", "TILES", "NTV")}}
        consts = dict(SMOOTH=True, V_AMAX=True, BS=sum_rows(block_d), BD=block_d, BS_V=BLOCK_S, BD_V=block_dv,
                      FMA_DIV=True)
        fn = _sums_pass
    else:
        sig = {**{n: "*bf16" for n in ("q_ptr", "k_ptr", "v_ptr")}, **{n: "*u8" for n in ("q_out", "k_out", "v_out")},
               "sums_ptr": "*fp64", **{n: "*fp32" for n in ("signs_qk", "scale_qk", "signs_v", "scale_v")},
               "amax_ptr": "*i32", "descale_ptr": "*fp32", "dummy": "*fp32",
               **{n: "i32" for n in ("Sq", "Sk", "S_OUT_V", "Dqk", "Dv", "qsb", "qss", "qsh", "qsd", "ksb", "kss",
                                     "ksh", "ksd", "vsb", "vss", "vsh", "vsd", "HKV", "NTQ", "NTK", "NTV", "SLOTS")}}
        consts = dict(MODE=mode, GROUP=group, SMOOTH=smooth, HAD=hadamard, HBLOCK_QK=block_d if hadamard else 1,
                      HSTAGES_QK=block_d.bit_length() - 1 if hadamard else 0, HBLOCK_V=block_dv if hadamard else 1,
                      HSTAGES_V=block_dv.bit_length() - 1 if hadamard else 0, PER_TENSOR=per_tensor,
                      BS=tile_rows(max(block_d, block_dv)) if hadamard else BLOCK_S, BD_QK=block_d, BD_V=block_dv,
                      FMA_DIV=True)
        fn = _quant_qkv
    sig.update({name: "constexpr" for name in consts})
    return triton.compile(ASTSource(fn, sig, consts, {}), target=TARGETS[target], options={"num_warps": 4})


def compile_int8_quantizer(target: str = "sm90", hadamard: bool = True, smooth: bool = True, group: int = 4,
                           block_d: int = 128, block_dv: int = 128, key_block: int = 128):
    """The INT8 Q.K^T mode's codes launch (``_int8_qkv``: q, k and V^T) compiled for a GPU
    target (the sums launch before it is compile_quantizer's mode 0)."""
    from ..triton_kernels.quantize import BLOCK_S, tile_rows
    from ..triton_kernels.quantize_int8 import _int8_qkv
    sig = {**{n: "*bf16" for n in ("q_ptr", "k_ptr", "v_ptr")}, **{n: "*i8" for n in ("q_out", "k_out")},
           "v_out": "*u8", **{n: "*fp32" for n in ("qd_ptr", "kd_ptr")}, "sums_ptr": "*fp64",
           **{n: "*fp32" for n in ("signs_ptr", "scale_ptr")}, "v_amax": "*i32", "vd_ptr": "*fp32", "dummy": "*fp32",
           **{n: "i32" for n in ("Sq", "Sk", "S_OUT_V", "D", "Dv", "qsb", "qss", "qsh", "qsd", "ksb", "kss", "ksh",
                                 "ksd", "vsb", "vss", "vsh", "vsd", "HKV", "NTQ", "NTK", "NTV", "KEY_BLOCK")}}
    consts = dict(GROUP=group, SMOOTH=smooth, HAD=hadamard, HBLOCK=block_d if hadamard else 1,
                  HSTAGES=block_d.bit_length() - 1 if hadamard else 0, NSUB_K=-(-key_block // tile_rows(block_d)),
                  K_BLOCK_DS=key_block == 128, BS=tile_rows(block_d), BD=block_d, BS_V=BLOCK_S, BD_V=block_dv,
                  FMA_DIV=True)
    sig.update({name: "constexpr" for name in consts})
    return triton.compile(ASTSource(_int8_qkv, sig, consts, {}), target=TARGETS[target],
                          options={"num_warps": 4})


def compile_decode(target: str = "sm90", kv: str = "bf16", page: int = 0,
                   kd_mode: int = 0, vd_mode: int = 0, q_fp8: bool = False, split: bool = True, causal: bool = True,
                   sq: int = 1, group: int = 4, head_dim: int = 128, block_n: int = 64, num_warps: int = 4,
                   num_stages: int = 2, leftpad: bool = False, fp8_dot: bool = False, hw_round: bool = True,
                   aligned: bool = False, block_m: int = 16, page_lookups: bool | None = None):
    """The decode kernel (zyfa.triton_kernels.decode) and, when ``split``, its merge kernel,
    compiled for a GPU target; returns the decode kernel's. ``fp8_dot``: the FP8 dots (an E4M3
    cache with descales per (sequence, kv head); q E4M3 with ``q_fp8``, else BF16 quantized in
    the kernel), E4M3 rounded by the GPU's conversion with ``hw_round``. ``aligned``: the
    pointers and the cache's, q's and the output's strides marked divisible by 16, as Triton's
    launcher specializes them at run time for caches of head dim 64-256 (without it the loads
    compile a byte or two at a time). ``page_lookups``: as DecodeTile's (None: as default_tile
    sets it for the cache, a lookup a page with the FP8 dots, a key otherwise)."""
    import inspect as _inspect
    from ..decode_splits import merge_kernel
    from ..triton_kernels.decode import decode_kernel
    from ..triton_kernels.decode_launch import DecodeTile, pages_a_tile
    el = {"bf16": "*bf16", "fp16": "*fp16", "fp8": "*fp8e4nv"}[kv]
    ptrs = dict(Q="*fp8e4nv" if q_fp8 else el if kv != "fp8" else "*bf16", K=el, V=el, QD="*fp32", KD="*fp32",
                VD="*fp32", O="*bf16", LSE="*fp32", O_PART="*fp32", LSE_PART="*fp32", SEQLENS="*i32", TABLE="*i32",
                LEFTPAD="*i32")
    rows = group * sq
    consts = dict(SQ=sq, GROUP=group, D=head_dim, DV=head_dim, BLOCK_M=max(block_m, triton.next_power_of_2(rows)),
                  BLOCK_N=block_n, PAGE=page, PAGES_A_TILE=pages_a_tile(page, DecodeTile(block_n, num_warps, num_stages, page_lookups=fp8_dot if page_lookups is None else page_lookups)), Q_FP8=q_fp8, KD_MODE=kd_mode,
                  VD_MODE=vd_mode, CAUSAL=causal, SPLIT=split, UPCAST_DOT=False, HAS_LEFTPAD=leftpad,
                  FP8_DOT=fp8_dot, HW_ROUND=fp8_dot and hw_round)
    sig = {n: ptrs.get(n, "constexpr" if n in consts else "fp32" if n == "qk_scale_log2" else "i32")
           for n in _inspect.signature(decode_kernel.fn).parameters}
    opts = {"num_warps": num_warps, "num_stages": num_stages}
    attrs = {}
    if aligned:
        names = list(sig)
        div16 = [n for n in names if sig[n].startswith("*") or (n.startswith("stride_") and not n.startswith("stride_d"))]
        attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in div16}
    k = triton.compile(ASTSource(decode_kernel, sig, consts, attrs), target=TARGETS[target], options=opts)
    if split:
        mconsts = dict(SQ=sq, GROUP=group, DV=head_dim, SPLITS=8)
        msig = {n: "*fp32" if n in ("O_PART", "LSE_PART", "LSE") else "*bf16" if n == "O" else
                "constexpr" if n in mconsts else "i32" for n in _inspect.signature(merge_kernel.fn).parameters}
        triton.compile(ASTSource(merge_kernel, msig, mconsts, {}), target=TARGETS[target], options={"num_warps": 1})
    return k


def assemble_compiled(k):
    """A Triton-compiled kernel's PTX assembled (registers, spills) by the ptxas Triton set its
    PTX version for (TRITON_PTXAS_PATH where a machine sets it, else the wheel's)."""
    from triton import knobs
    return assemble(k.asm["ptx"], ptxas=knobs.nvidia.ptxas.path)


def summarize_sm90(k) -> dict:
    ptx = k.asm["ptx"]
    code = sass(k.asm["cubin"])
    a = assemble_compiled(k)
    return {"wgmma_e4m3": len(re.findall(r"wgmma\.mma_async[^\n]*e4m3", ptx)),
            "cvt_e4m3x2": ptx.count("cvt.rn.satfinite.e4m3x2.f32"), "sass_lines": code.count("\n"),
            "qgmma_sass": code.count("QGMMA"), "hgmma_sass": code.count("HGMMA"),
            "mufu_ex2": code.count("MUFU.EX2"), "shfl_idx": code.count("SHFL.IDX"), "f2i": len(re.findall(r"\bF2I", code)),
            "hfma2": code.count("HFMA2"), "ffma": len(re.findall(r"\bFFMA\b", code)),
            "registers": a.registers or None, "spill_bytes": a.spill_bytes, "shared_bytes": k.metadata.shared}


def inspect(target: str, fp8: bool, p_rule: str, block_m: int, block_n: int, num_warps: int, num_stages: int,
            head_dim: int = 128, head_dim_v: int = 128, hw_round: bool = False,
            wgmma_key_order: bool = False, window: bool = False) -> dict:
    k = compile_attention(target, fp8=fp8, p_rule=p_rule, block_m=block_m, block_n=block_n,
                          num_warps=num_warps, num_stages=num_stages, head_dim=head_dim, head_dim_v=head_dim_v,
                          hw_round=hw_round, wgmma_key_order=wgmma_key_order, window=window)
    if target == "sm90":
        return summarize_sm90(k)
    asm = k.asm["amdgcn"]
    return {"mfma_f8": len(re.findall(r"v_mfma\w*f8", asm)), "v_exp_f32": asm.count("v_exp_f32"),
            "pk_fma_f16": asm.count("v_pk_fma_f16"),
            "scratch": "scratch_" in asm and ".private_segment_fixed_size: 0" not in asm}


def main(argv=None):
    """`python -m zyfa.verify.triton_compile TARGET [--json SPEC]`; SPEC is inspect()'s kwargs as JSON.

    Runs in its own process in tests: Triton's interpreter (TRITON_INTERPRET=1) replaces
    kernels by Python functions that cannot be compiled.
    """
    import argparse
    import json
    ap = argparse.ArgumentParser()
    ap.add_argument("target", choices=sorted(TARGETS))
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    if a.json:
        print(json.dumps(inspect(a.target, **json.loads(a.json))))
        return
    for rule in P_RULE_IDS:
        print(rule, inspect(a.target, True, rule, 128, 64, 8, 2))


if __name__ == "__main__":
    main()
