"""Compile the kernels for H200 (sm_90a) and MI355X (gfx950) on the CPU and read the code.

Each compile runs in a subprocess without TRITON_INTERPRET (the interpreter replaces
kernels by Python functions)."""
import json
import os
import subprocess
import sys

import pytest


def inspect(target, **spec):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-m", "zyfa.verify.triton_compile", target, "--json",
                        json.dumps(spec)], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _tile(t):
    return dict(block_m=t[0], block_n=t[1], num_warps=t[2], num_stages=t[3])


@pytest.mark.parametrize("tile", [(64, 128, 4, 2), (128, 128, 8, 3)])
@pytest.mark.slow
def test_fp8_sm90_uses_qgmma_without_spills(tile):
    info = inspect("sm90", fp8=True, p_rule="lean_cubic", **_tile(tile))
    assert info["wgmma_e4m3"] > 0 and info["qgmma_sass"] > 0, info
    assert info["spill_bytes"] == 0, info
    assert info["registers"] <= 255, info
    # lean P issues no exponential per score: only per-row factors use MUFU.EX2
    exact = inspect("sm90", fp8=True, p_rule="exact", **_tile(tile))
    assert info["mufu_ex2"] * 8 < exact["mufu_ex2"], (info, exact)


@pytest.mark.slow
def test_half_precision_rule_compiles_to_packed_half_arithmetic():
    """lean_cubic_f16 in the Triton kernel: Triton packs its half arithmetic two scores an
    instruction on both targets (HFMA2 on sm_90a, v_pk_fma_f16 on gfx950), without spills."""
    tile = _tile((128, 128, 8, 2))
    cubic, half = (inspect("sm90", fp8=True, p_rule=r, **tile) for r in ("lean_cubic", "lean_cubic_f16"))
    assert half["hfma2"] > 0 and cubic["hfma2"] == 0 and half["ffma"] < cubic["ffma"], (half, cubic)
    assert half["spill_bytes"] == 0, half
    amd = inspect("gfx950", fp8=True, p_rule="lean_cubic_f16", **_tile((128, 64, 8, 2)))
    assert amd["pk_fma_f16"] > 0 and amd["mfma_f8"] > 0, amd


@pytest.mark.slow
def test_exact_rule_rounds_in_hardware_on_sm90():
    """hw_round: the exact rule's E4M3 codes from cvt.rn.satfinite.e4m3x2.f32 (inline PTX, two
    values an instruction) instead of integer rounding; the same codes (GPU test)."""
    tile = _tile((64, 128, 4, 3))
    integer, hw = (inspect("sm90", fp8=True, p_rule="exact", hw_round=h, **tile) for h in (False, True))
    assert integer["cvt_e4m3x2"] == 0 and hw["cvt_e4m3x2"] > 0, (integer, hw)
    assert hw["spill_bytes"] == 0 and hw["ffma"] < integer["ffma"] and hw["sass_lines"] < integer["sass_lines"]


@pytest.mark.slow
def test_wgmma_key_order_passes_p_without_shuffles():
    """With keys reordered within groups of 16, Triton moves P from the QK^T accumulator to
    the P.V operand without SHFL.IDX (the 64 x 128 tile's 32 a loop iteration go)."""
    tile = _tile((64, 128, 4, 3))
    plain, ordered = (inspect("sm90", fp8=True, p_rule="exact", hw_round=True, wgmma_key_order=o, **tile)
                      for o in (False, True))
    assert plain["shfl_idx"] >= 32 and ordered["shfl_idx"] == 0, (plain, ordered)
    assert ordered["spill_bytes"] == 0 and ordered["sass_lines"] < plain["sass_lines"], (plain, ordered)


def test_bf16_sm90_uses_hgmma():
    info = inspect("sm90", fp8=False, p_rule="exact", **_tile((128, 64, 8, 3)))
    assert info["hgmma_sass"] > 0 and info["spill_bytes"] == 0, info


@pytest.mark.parametrize("head_dims", [(128, 128), (192, 128)])
def test_fp8_gfx950_uses_fp8_mfma(head_dims):
    info = inspect("gfx950", fp8=True, p_rule="lean_cubic", head_dim=head_dims[0], head_dim_v=head_dims[1],
                   **_tile((128, 64, 8, 2)))
    assert info["mfma_f8"] > 0, info


@pytest.mark.parametrize("fp8", [True, False], ids=["fp8", "bf16"])
@pytest.mark.slow
def test_sliding_window_kernel_compiles_without_spills(fp8):
    """The windowed kernel (WINDOW: a masked left band before the unmasked blocks) compiles for
    sm_90a, on the tensor cores and without spills, and for gfx950 (FP8 on MFMA)."""
    tile = _tile((128, 128, 8, 2) if fp8 else (128, 64, 8, 3))
    info = inspect("sm90", fp8=fp8, p_rule="exact", window=True, **tile)
    assert info["spill_bytes"] == 0 and info["registers"] <= 255, info
    assert info["qgmma_sass" if fp8 else "hgmma_sass"] > 0, info
    amd = inspect("gfx950", fp8=fp8, p_rule="lean_cubic", window=True, **_tile((128, 64, 8, 2)))
    assert amd["mfma_f8"] > 0 if fp8 else amd["v_exp_f32"] > 0, amd
