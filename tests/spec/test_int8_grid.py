"""The INT8 Q.K^T mode's grid fold (zyfa.spec.int8_grid): the block max rounded up onto M c's
grid keeps every P at or below 2^8 for any factor, and the generated kernel's arithmetic (R =
M + S, y = fma(R, c, -X), the exact rule's addend RD(8 - X)) gives the spec's y bit for bit."""
import torch

from zyfa.spec.constants import MAGIC, NEG_FLOOR, P_ONE_BITS
from zyfa.spec.e4m3 import e4m3_encode_nonneg, fma32
from zyfa.spec.int8_grid import grid_factor, grid_max, grid_offset, y_shifted
from zyfa.spec.rules import P_RULES, p_bits


def _block(rows=4096, keys=128, seed=0):
    """Exact int32 scores (|S| < 2^22) and one factor a row, log-uniform over 1e-9..1e3 (either
    sign), as the spec holds them: S (rows, keys) float32, c (rows, 1)."""
    g = torch.Generator().manual_seed(seed)
    scale = torch.randint(1, 23, (rows, 1), generator=g).double().exp2()
    S = (torch.rand(rows, keys, generator=g, dtype=torch.float64) * 2 - 1) * scale
    S = S.round().clamp(-(2 ** 22) + 1, 2 ** 22 - 1).float()
    c = 10.0 ** (torch.rand(rows, 1, generator=g, dtype=torch.float64) * 12 - 9)
    sign = torch.where(torch.rand(rows, 1, generator=g) < 0.25, -1.0, 1.0).double()
    return S, grid_factor((c * sign).float())


def _spec_y(S, c):
    products = S.double() * c.double()                                # exact
    offset = grid_offset(c)
    X, r = grid_max(products.amax(-1), offset)
    return products, X, r, offset


def test_the_rounded_up_max_keeps_p_at_most_2_to_the_8():
    S, c = _block()
    products, X, r, offset = _spec_y(S, c)
    m = products.amax(-1)
    step = X.double().abs() * 2.0 ** -23                              # M c's grid step: ~1.5 |c|
    assert (r >= m).all() and (r - m <= step).all()
    y = fma32(S, c, -r[:, None])
    assert (y <= 0).all() and (y.amax(-1) >= -step).all()
    for rule in P_RULES:
        assert int(p_bits(y, rule).max()) <= P_ONE_BITS, rule
    y8 = y_shifted(S, c, X, offset)
    assert (y8 <= 8).all() and int(e4m3_encode_nonneg(torch.exp2(y8.double())).max()) <= P_ONE_BITS


def test_the_kernels_biased_ffma_is_the_specs_y():
    """The kernel: c > 0 after its sign flip (S -> -S), R = M + S, X rebuilt as r + M c, y =
    RN(R c - X), the exact rule RN(R c + RD(8 - X)), all emulated exactly in float64."""
    S, c = _block(seed=1)
    _, X, r, offset = _spec_y(S, c)
    sign = torch.sign(c)
    R, ca = (MAGIC + S * sign).double(), c.abs().double()
    Xk = (r.double() + offset.double()).float()                       # emit_grid_addend's X
    assert torch.equal(Xk, X)
    y_kernel = (R * ca - Xk.double()[:, None]).float()
    assert torch.equal(y_kernel, fma32(S, c, -r[:, None]))
    a = (8.0 - Xk.double()).float()
    a = torch.where(a.double() > 8.0 - Xk.double(), torch.nextafter(a, torch.tensor(-float("inf"))), a)
    y8_kernel = (R * ca + a.double()[:, None]).float()
    assert torch.equal(y8_kernel, y_shifted(S, c, X, offset))


def test_fully_masked_rows_and_non_finite_factors():
    """A fully masked row's max is -inf: the floor after the grid step; a NaN or infinite
    factor leaves the other keys' grid alone (the spec's grid takes the finite factors)."""
    m = torch.tensor([float("-inf"), 3.0, float("nan")])
    c = torch.tensor([[1e-3, float("nan")], [2e-3, float("inf")], [1e-3, 1e-3]])
    X, r = grid_max(m, grid_offset(grid_factor(c)))
    assert r[0] == NEG_FLOOR and r[1] >= 3.0 and r[2].isnan()
