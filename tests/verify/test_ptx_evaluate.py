"""The generated PTX P code evaluated on the CPU (zyfa.verify.ptx.evaluate) against the spec's
codes bit for bit: the text ptxas would get, not the step list it was made from, so a changed
immediate, operand order or byte permute in zyfa.asm.ptx fails here without a GPU."""
from fractions import Fraction

import numpy as np
import pytest
import torch

from zyfa.asm.ptx.lean_p import PTX_RULES, p_codes_kernel
from zyfa.spec.rules import p_bits
from zyfa.verify.ptx import evaluate as EV


def _y_grid(seed=0) -> np.ndarray:
    """A fine grid over the rules' range with the integers and half-integers (floor's ties),
    values below the floor, and random float32 y; a multiple of 4 long."""
    g = np.random.default_rng(seed)
    y = np.concatenate([np.linspace(-17.0, 0.0, 20001), np.arange(-17.0, 0.5, 0.5),
                        -17.0 * g.random(4000), -g.random(1000) * 2.0 ** -g.integers(0, 20, 1000)])
    y = y.astype(np.float32)
    return y[: len(y) // 4 * 4]


def _mismatch(got, want, y) -> str:
    bad = np.nonzero(got != want)[0]
    return f"{len(bad)}/{len(y)} codes differ; first at y={y[bad[:5]].tolist()}: got {got[bad[:5]].tolist()}, spec {want[bad[:5]].tolist()}"


@pytest.mark.parametrize("rule", PTX_RULES)
def test_generated_ptx_p_codes_equal_the_spec(rule):
    y = _y_grid()
    got = EV.p_codes_from_ptx(p_codes_kernel(rule)[1], y).astype(np.int32)
    want = p_bits(torch.from_numpy(y), rule).numpy()
    assert np.array_equal(got, want), f"{rule}: " + _mismatch(got, want, y)


def test_exact_pair_packs_the_hardware_rounding_of_exp2():
    """emit_p_exact_pair with ex2 taken as exact exp2 rounded to float32 (MUFU.EX2 is ~2 ulp
    off on hardware, so this checks the conversion's operand order, rounding and saturation,
    not the exponential): the spec's exact codes."""
    y = np.clip(_y_grid(1), -16.0, 0.0)
    got = EV.exact_pair_codes(y + np.float32(8.0)).astype(np.int32)
    want = p_bits(torch.from_numpy(y), "exact").numpy()
    assert np.array_equal(got, want), _mismatch(got, want, y)


@pytest.mark.parametrize("rule", ["lean_cubic", "lean_cubic_f16"])
def test_a_changed_immediate_is_caught(rule):
    """The evaluator reads the text: a constant moved by 0.05% (2^12 float32 ulps, 1 half
    ulp) changes codes."""
    text = p_codes_kernel(rule)[1]
    old, new = ("0f40B1F738", "0f40B1E738") if rule == "lean_cubic" else ("0x45904590", "0x45914591")
    assert old in text
    y = _y_grid()
    a = EV.p_codes_from_ptx(text, y)
    b = EV.p_codes_from_ptx(text.replace(old, new), y)
    assert (a != b).any()


def _exact_round(v: Fraction, dtype) -> float:
    f = np.asarray(float(v)).astype(dtype)
    near = [np.nextafter(f, dtype(-np.inf)), f, np.nextafter(f, dtype(np.inf))]
    bits = np.uint16 if dtype == np.float16 else np.uint32
    return float(min(near, key=lambda x: (abs(Fraction(float(x)) - v), int(np.array(x).view(bits)) & 1)))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_evaluator_fma_and_add_round_once(dtype):
    """The evaluator's fma/add against exact rational arithmetic, including sums whose float64
    value lands on a midpoint of the target format (where rounding twice would go wrong)."""
    g = np.random.default_rng(3)
    n = 3000
    scale = 2.0 ** g.integers(-8, 8, (3, n))
    a, b, c = (g.standard_normal((3, n)) * scale).astype(dtype)
    # constructed midpoints: c = x + half an ulp of x, a*b tiny of either sign
    x = (g.standard_normal(n) * 64).astype(dtype)
    ulp = np.abs(np.nextafter(x, dtype(np.inf)).astype(np.float64) - x.astype(np.float64))
    c2 = (x.astype(np.float64) + ulp / 2)
    a2 = np.full(n, 2.0 ** -30 if dtype == np.float32 else 2.0 ** -14, dtype)
    b2 = np.where(g.random(n) < 0.5, -1, 1).astype(dtype) * dtype(2.0 ** -12 if dtype == np.float16 else 2.0 ** -20)
    for (aa, bb, cc) in ((a, b, c.astype(np.float64)), (a2, b2, c2)):
        if dtype == np.float16:
            keep = np.abs(cc) < 60000
            aa, bb, cc = aa[keep], bb[keep], cc[keep]
        got = EV._round_exact(*EV._two_sum(aa.astype(np.float64) * bb.astype(np.float64), cc), dtype)
        want = [_exact_round(Fraction(float(p)) * Fraction(float(q)) + Fraction(float(r)), dtype)
                for p, q, r in zip(aa, bb, cc)]
        bad = np.nonzero(got.astype(np.float64) != np.array(want))[0]
        assert len(bad) == 0, f"{len(bad)}/{len(got)} wrong, first at a={aa[bad[:3]]}, b={bb[bad[:3]]}, c={cc[bad[:3]]}"


def test_epilogue_quad_transpose_gives_each_lane_a_column_group():
    """The epilogue's butterfly exchange (emitted PTX, shuffles and selects run on 64 lanes):
    lane l of a quad ends with word l of each of the quad's lanes, in lane order, so its
    16-byte store holds one row's columns 8 (4i + l) .. + 7."""
    from zyfa.asm.ptx.epilogue import emit_transpose_quad
    from zyfa.asm.ptx.target import program
    prog = program()
    words, up = prog.regs("b32", 4), prog.regs("pred", 2)
    out = emit_transpose_quad(prog, words, up)
    lanes = np.arange(64)
    given = np.random.default_rng(0).integers(0, 2 ** 32, (4, 64), dtype=np.uint32)
    regs = {str(w): given[k] for k, w in enumerate(words)}
    regs.update({str(up[0]): (lanes & 2) // 2, str(up[1]): lanes & 1})
    ev = EV.Evaluator(regs).run(EV.render_body(prog))
    for k, reg in enumerate(out):
        np.testing.assert_array_equal(ev.regs[str(reg)], given[lanes & 3, (lanes & ~3) | k])


def test_running_reference_is_the_running_max():
    """The fast mode's reference (softmax._emit_running_reference, emitted PTX run on 64 lanes):
    A_new = max(A, the row's max of S times c over the quad), alpha = 2^(A - A_new), and -A_new
    for the P codes' FMA."""
    from zyfa.asm.ptx.softmax import _emit_running_reference
    from zyfa.asm.ptx.fragments import acc_row_half
    from zyfa.asm.ptx.layout import BLOCK_N
    from zyfa.asm.ptx.target import program
    prog = program()
    s, facs, A = prog.regs("f32", BLOCK_N // 2), prog.regs("f32", 2), prog.regs("f32", 2)
    A_new, alpha, neg = _emit_running_reference(prog, s, facs, A, masked=False)
    g = np.random.default_rng(4)
    lanes = 64
    S = (g.standard_normal((BLOCK_N // 2, lanes)) * 40).astype(np.float32)
    fac = np.float32(0.03)
    A0 = (g.standard_normal((2, lanes)) * 1.5).astype(np.float32)     # some rows keep A, some move
    bits = lambda a: a.astype(np.float32).view(np.uint32)  # noqa: E731
    regs = {str(r): bits(S[i]) for i, r in enumerate(s)}
    regs.update({str(facs[h]): bits(np.full(lanes, fac)) for h in (0, 1)})
    regs.update({str(A[h]): bits(A0[h]) for h in (0, 1)})
    ev = EV.Evaluator(regs).run(EV.render_body(prog))
    val = lambda r: ev.regs[str(r)].view(np.float32)  # noqa: E731
    for half in (0, 1):
        rows = S[[i for i in range(BLOCK_N // 2) if acc_row_half(i) == half]].max(0)
        quad = rows.reshape(-1, 4).max(1).repeat(4)                   # the quad holds one row's columns
        m = (quad.astype(np.float64) * fac).astype(np.float32)
        want = np.maximum(A0[half], m)
        assert (A0[half] < m).any() and (A0[half] > m).any()          # both cases occur
        np.testing.assert_array_equal(val(A_new[half]), want)
        np.testing.assert_array_equal(val(neg[half]), -want)
        np.testing.assert_array_equal(val(alpha[half]), np.exp2((A0[half] - want).astype(np.float64)).astype(np.float32))
