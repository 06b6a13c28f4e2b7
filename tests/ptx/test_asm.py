"""The assembly generator core, the PTX target and the generated lean-P kernel."""
import re

import pytest
import torch

from zyfa.spec.constants import MAGIC, P_ONE_BITS
from zyfa.spec.rules import p_bits
from zyfa.asm.program import Program
from zyfa.asm.ptx import target as T
from zyfa.asm.ptx.assemble import assemble
from zyfa.asm.ptx.lean_p import PTX_RULES, p_codes_kernel
from zyfa.spec.rules import HALF_RULES

from conftest import gpu


def test_program_declares_what_it_used():
    prog = T.program()
    a, b = prog.regs("f32", 2)
    p = prog.reg("pred")
    prog.emit("add.f32", a, a, b, guard=p)
    prog.label("L0")
    assert str(a) == "%f32_0" and prog.register_counts() == {"f32": 2, "pred": 1}
    assert prog.declarations() == ["\t.reg .f32 %f32_<2>;", "\t.reg .pred %pred_<1>;"]
    assert prog.body == ["\t@%pred_0 add.rn.f32 %f32_0, %f32_0, %f32_1;", "L0:"]
    with pytest.raises(ValueError, match="op 'exp2'"):
        prog.emit("exp2", a, b)
    with pytest.raises(ValueError, match="register kind"):
        prog.reg("f16x2")
    with pytest.raises(ValueError, match="twice"):
        prog.label("L0")
    assert isinstance(prog, Program)


def test_f32_immediates_are_bit_exact():
    assert T.f32(MAGIC) == "0f4B400000"
    assert T.f32(P_ONE_BITS + MAGIC) == "0f4B400078"
    assert T.f32(-15.0) == "0fC1700000"


@pytest.mark.parametrize("rule", PTX_RULES)
def test_lean_p_kernel_assembles_without_mufu_or_conversions(rule):
    name, ptx = p_codes_kernel(rule)
    a = assemble(ptx)
    assert a.spill_bytes == 0 and 0 < a.registers <= 32, a.report
    sass = a.sass()
    ops = set(re.findall(r"\b([A-Z][A-Z0-9]+)[.A-Z0-9]*\s", sass))
    assert "PRMT" in ops
    # the lean rules' point: no exp2 on the MUFU pipe, no float<->int conversion instructions
    assert not ops & {"MUFU", "F2I", "I2F", "F2F"}, sorted(ops)
    if rule in HALF_RULES:
        # packed half: one F2FP.F16 packs two y, the rest is HFMA2/HADD2/HMNMX2 on two scores
        assert {"HFMA2", "HADD2", "HMNMX2"} <= ops and "FFMA" not in ops, sorted(ops)
        assert sass.count("F2FP") == sass.count("F2FP.F16.F32.PACK_AB") == 2, "one pack per two of the four y"
    else:
        assert "FFMA" in ops and "F2FP" not in ops, sorted(ops)


def test_unknown_rule_is_refused():
    with pytest.raises(ValueError, match="generated P rules"):
        p_codes_kernel("exact")


@gpu
@pytest.mark.parametrize("rule", PTX_RULES)
def test_generated_p_codes_equal_the_spec(rule):
    from zyfa.verify.ptx.p_codes import p_codes
    n = (1 << 22) + 3                                     # not a multiple of 4: the tail is padded
    y = -torch.rand(n, device="cuda") * 20                # past the clamp at -15 too
    y[:1000] = -torch.arange(1000, device="cuda").float() / 64     # integers and ties
    got = p_codes(y, rule).cpu().to(torch.int32)
    spec = p_bits(y.cpu(), rule, fused=True)
    mism = int((got != spec).sum())
    assert mism == 0, f"{mism} of {n} codes differ from the spec"


def test_qk_tile_kernel_assembles_to_tma_and_fp8_wgmma():
    from zyfa.verify.ptx.qk_tile import qk_tile_kernel
    a = assemble(qk_tile_kernel()[1])
    sass = a.sass()
    assert a.spill_bytes == 0, a.report
    assert "QGMMA" in sass and "UTMALDG" in sass, "expected FP8 wgmma (QGMMA) and TMA loads (UTMALDG)"


@gpu
@pytest.mark.parametrize("q_row,k_row", [(0, 0), (64, 128), (192, 0)])
def test_qk_tile_equals_float64(q_row, k_row):
    from zyfa.verify.ptx.qk_tile import qk_tile
    g = torch.Generator(device="cuda").manual_seed(q_row + k_row)
    q = (torch.randn(256, 128, device="cuda", generator=g) * 4).to(torch.float8_e4m3fn)
    k = (torch.randn(256, 128, device="cuda", generator=g) * 4).to(torch.float8_e4m3fn)
    s = qk_tile(q, k, q_row, k_row)
    ref = q[q_row:q_row + 64].double() @ k[k_row:k_row + 64].double().T
    err = ((s.double() - ref).norm() / ref.norm()).item()
    # products of E4M3 values are exact; Hopper's FP8 tensor cores accumulate with ~13-14
    # mantissa bits (measured 1.3e-4 here), while a wrong fragment layout gives O(1) errors
    assert err < 5e-4, f"rel err {err:.3e}; worst at {divmod(int((s.double() - ref).abs().argmax()), 64)}"
    shuffled = ((s.double()[:, torch.randperm(64, device="cuda")] - ref).norm() / ref.norm()).item()
    assert shuffled > 0.5


@pytest.mark.parametrize("op,sass_name", [("ffma", "FFMA"), ("fmnmx", "FMNMX"), ("prmt", "PRMT"),
                                          ("mufu_ex2", "MUFU.EX2"), ("cvt_e4m3x2", "F2FP"), ("hfma2", "HFMA2")])
def test_microbench_kernels_keep_the_instruction_under_test(op, sass_name):
    """A throughput kernel is wrong if ptxas folds its instruction away: each chain's
    instruction must survive into the SASS."""
    from zyfa.verify.ptx.microbench import microbench_kernel
    chains = 16
    sass = assemble(microbench_kernel(op, chains)[1]).sass()
    assert sass.count(sass_name) >= chains, f"{sass_name} appears {sass.count(sass_name)} times"
