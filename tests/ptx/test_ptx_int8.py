"""The INT8 Q.K^T mode in the generated Hopper kernel (Layout.int8_qk: int8 Q and K, E4M3
V^T, a factor a query row and a descale a block of 128 keys). Its scores are exact integers,
so with a bit-exact P rule its P codes are the spec's: the output equals the spec's under the
BF16 rounding and the LSE within float32 ordering, as for the FP8 kernel on exact S."""
import re

import pytest
import torch

from conftest import describe_mismatch, hopper, rel_err
from zyfa.asm.ptx import attention as attn
from zyfa.asm.ptx.assemble import assemble
from zyfa.spec.reference import fp8_attention_spec



@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("dims", attn.HEAD_DIMS, ids=lambda d: f"d{d[0]}-{d[1]}")
def test_int8_kernel_assembles_within_budget(dims, causal):
    """S by the int8 tensor cores (k-steps of 32 bytes, at each place a block's S is issued:
    both copies of the serial kernel's block loop; the specialized consumer's first block and
    both copies of its loop; the Dv 256 consumer's one), P V^T by the E4M3 ones; made float by
    an integer and a float add a score (no conversion instruction in the loop); the E4M3
    kernel's register cap, no spills."""
    from zyfa.asm.ptx.block import BLOCK_LOOP_COPIES as n
    from zyfa.asm.ptx.specialized import LAUNCH_REGISTERS
    dqk, dv = dims
    layout = attn.layout_for(dqk, dv=dv, int8_qk=True)
    assert layout.specialized == attn.layout_for(dqk, dv=dv).specialized      # the E4M3 kernel's schedule
    ptx = attn.attention_kernel("exact", causal, dqk, int8_qk=True)[1]
    assert "s32.s8.s8" in ptx and "kfac_ptr" in ptx
    a = assemble(ptx)
    ops = re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)", a.sass())
    assert a.spill_bytes == 0, a.report
    if layout.specialized:
        sites = 1 if dv > attn.HEAD_DIM else n + 1
        assert a.registers <= LAUNCH_REGISTERS[layout.consumers]
    else:
        sites = n
        assert a.registers <= (attn.REGISTER_BUDGET if dqk == 128 else attn.REGISTER_CAP_D64)
        assert ops.count("QGMMA") == 4 * n
    assert ops.count("IGMMA") == sites * dqk // 32 and "QGMMA" in ops
    first, last = ops.index("IGMMA"), len(ops) - 1 - ops[::-1].index("QGMMA")
    for conversion in ("I2F", "F2I", "I2FP"):
        assert conversion not in ops[first:last], f"{conversion} in the main loop"


def test_masked_int32_score_converts_to_minus_inf_below_every_score():
    """MASKED_SCORE (int8_qk: the mask's value in int32 scores, before their magic-number
    conversion) becomes -inf's bits under the conversion's integer add and lies below every
    score of int8 codes at head dim 256, so the integer row max never picks it over a key."""
    from zyfa.asm.ptx.int8_qk import MASKED_SCORE
    from zyfa.spec.constants import MAGIC_BITS
    bits = int(MASKED_SCORE, 16)
    assert (bits + MAGIC_BITS) % 2**32 == 0xFF800000
    assert bits - 2**32 < -256 * 127 * 127


def test_int8_layout_refuses_what_it_does_not_implement():
    with pytest.raises(ValueError, match="INT8"):
        attn.layout_for(192, dv=192, int8_qk=True)
    with pytest.raises(ValueError, match="INT8"):
        attn.layout_for(128, packed=True, int8_qk=True)


SHAPES = [                               # B, Sq, Sk, Hq, Hkv, causal
    (1, 70, 70, 2, 1, True),
    (2, 33, 300, 4, 2, True),            # seqlen_q < seqlen_k (bottom-right), a key tail
    (1, 1, 45, 2, 2, True),
    (1, 777, 777, 8, 1, True),           # several diagonal blocks
    (1, 130, 200, 4, 2, False),
    (1, 2048, 2048, 8, 2, True),
]


def _case(shape, head_dim, seed=0, dv=None):
    import zyfa
    from zyfa.activations import make
    B, Sq, Sk, Hq, Hkv, causal = shape
    q, k, v = (t.bfloat16() for t in make("realistic", B, Sq, Hq, Hkv, head_dim, dv or head_dim, seqlen_k=Sk,
                                           seed=seed + Sq, device="cuda"))
    x = zyfa.quantize_int8_qk(q, k, v)           # k's descales: one a block of 128 keys
    assert x.k_descale.shape == (B, Hkv, -(-Sk // attn.BLOCK_N))
    return x, causal


def _run(x, causal, rule):
    import zyfa
    assert zyfa.explain(**x.kwargs(), causal=causal, p_rule=rule).startswith("selected: ptx")
    return zyfa.flash_attn_func(**x.kwargs(), causal=causal, p_rule=rule, return_lse=True, backend="ptx")


def _assert_as_spec(x, causal, rule, out, lse, window=(-1, -1)):
    """lean_cubic: the spec's P codes, so the outputs equal the spec's under the BF16
    rounding and the LSE within float32 ordering. exact (MUFU.EX2, ~2 ulp): a code may step
    near a rounding midpoint, in few rows' LSE and by at most one E4M3 step."""
    spec, lse_spec = fp8_attention_spec(**x.kwargs(), causal=causal, p_rule=rule, return_lse=True,
                                        window_size=window)
    rounding = rel_err(spec.bfloat16(), spec)
    assert rel_err(out, spec) <= 1.5 * rounding + 1e-4, (rel_err(out, spec), rounding, describe_mismatch(out, spec))
    diff = (lse.double() - lse_spec).abs()
    if rule == "exact":
        assert (diff > 1e-5).double().mean() <= 1e-2 and diff.max() <= 0.125, describe_mismatch(lse, lse_spec, 1e-5)
    else:
        assert diff.max() < 1e-5, describe_mismatch(lse, lse_spec, 1e-5)


@hopper
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("rule", ["lean_cubic", "exact"])
@pytest.mark.parametrize("shape", SHAPES)
def test_int8_kernel_equals_spec(shape, rule, head_dim):
    """Through flash_attn_func (the dispatcher picks the generated kernel): _assert_as_spec."""
    x, causal = _case(shape, head_dim)
    out, lse = _run(x, causal, rule)
    _assert_as_spec(x, causal, rule, out, lse)


@hopper
@pytest.mark.parametrize("dims", [(192, 128), (256, 256)], ids=["d192-128", "d256"])
@pytest.mark.parametrize("rule", ["lean_cubic", "exact"])
@pytest.mark.parametrize("shape", SHAPES)
def test_int8_specialized_kernels_equal_spec(shape, rule, dims):
    """The warp-specialized schedules' INT8 mode, called directly: _assert_as_spec."""
    from zyfa.asm.ptx.kernels import attention_int8qk
    x, causal = _case(shape, dims[0], dv=dims[1])
    out, lse = attention_int8qk(**x.kwargs(), causal=causal, p_rule=rule)
    _assert_as_spec(x, causal, rule, out, lse)


@hopper
@pytest.mark.parametrize("dims", [(128, 128), (192, 128), (256, 256)], ids=["d128", "d192-128", "d256"])
def test_int8_kernel_negative_and_nan_factors_as_the_spec(dims):
    """Rows whose descale is negative (S and c flipped in the loop) and a key block whose
    descale is NaN (a non-finite k): NaN exactly in the rows that see that block's keys. With
    30 more keys than queries, rows 64-97 share a tile with rows that see block 1 but see none
    of its keys themselves: they stay finite (their masked scores' y re-masked to -inf).
    d128 through flash_attn_func, the warp-specialized head dims called directly."""
    from zyfa.asm.ptx.kernels import attention_int8qk
    x, causal = _case((1, 300, 330, 4, 2, True), dims[0], seed=5, dv=dims[1])
    x.q_descale[0, 1, 7:200:3] *= -1
    x.k_descale[0, 1, 1] = float("nan")
    if dims == (128, 128):
        out, lse = _run(x, causal, "lean_cubic")
    else:
        out, lse = attention_int8qk(**x.kwargs(), causal=causal, p_rule="lean_cubic")
    spec, lse_spec = fp8_attention_spec(**x.kwargs(), causal=causal, p_rule="lean_cubic", return_lse=True)
    assert torch.equal(out.isnan(), spec.isnan()) and spec.isnan().any() and not spec.isnan().all()
    assert not spec[0, 64:98, 2:].isnan().any() and spec[0, 98:, 2:].isnan().all()     # kv head 1: heads 2, 3
    finite = ~spec.isnan()
    rounding = rel_err(spec[finite].bfloat16(), spec[finite])
    assert rel_err(out[finite], spec[finite]) <= 1.5 * rounding + 1e-4


@hopper
@pytest.mark.parametrize("dims", [(64, 64), (128, 128), (192, 128), (256, 256)], ids=lambda d: f"d{d[0]}-{d[1]}")
@pytest.mark.parametrize("rule", ["lean_cubic", "exact"])
@pytest.mark.parametrize("window,causal", [((0, 0), True), ((1, 0), True), ((127, 0), True), ((128, 0), True),
                                           ((129, 0), True), ((5000, 0), True), ((128, 129), False),
                                           ((-1, 1), False), ((129, -1), False)])
def test_int8_windowed_kernels_equal_spec(window, causal, rule, dims):
    """The INT8 Q.K^T mode with a window, through flash_attn_func: each block's k descale read
    for the tile's blocks counted from its first (kfac_base moved to it), _assert_as_spec."""
    import zyfa
    x, _ = _case((1, 333, 700, 4, 2, causal), dims[0], dv=dims[1])
    text = zyfa.explain(**x.kwargs(), causal=causal, p_rule=rule, window_size=window)
    assert text.startswith("selected: ptx") and "sliding window" in text, text
    out, lse = zyfa.flash_attn_func(**x.kwargs(), causal=causal, p_rule=rule, window_size=window, return_lse=True,
                                    backend="ptx")
    _assert_as_spec(x, causal, rule, out, lse, window)
