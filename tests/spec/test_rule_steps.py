"""Each lean rule is defined once, as a step list (zyfa.spec.rules). The torch spec runs the
steps; both generators must emit exactly these operations, in this order, on these values;
and the Triton kernel's hand-written P codes must equal the spec's in the interpreter."""
import re
import struct

import pytest
import torch
import triton
import triton.language as tl

from conftest import HAS_GPU
from zyfa.asm.gfx950 import lean_p as G
from zyfa.asm.gfx950.target import program as gfx950_program
from zyfa.asm.ptx import lean_p as P
from zyfa.asm.ptx.target import program as ptx_program
from zyfa.spec.constants import MAGIC, P_OFFSET_LOG2, Y_FLOOR
from zyfa.spec.rules import HALF_RULES, LEAN_RULES, P_RULE_TABLE, P_RULES, p_bits, run_steps
from zyfa.triton_kernels.p_rules import P_RULE_IDS, exact_p_bits, lean_p_bits


def _y_grid() -> torch.Tensor:
    """Every float32 y on a fine grid over the rules' range, integers and half-integers
    (floor's tie cases) included, below the floor too."""
    y = torch.linspace(-17.0, 0.0, 20001, dtype=torch.float64)
    return torch.cat([y, torch.arange(-17.0, 0.5, 0.5, dtype=torch.float64)]).float()


@pytest.mark.parametrize("rule", LEAN_RULES + HALF_RULES)
def test_spec_runs_the_steps_to_codes_near_exp2(rule):
    y = _y_grid()
    w = run_steps(P_RULE_TABLE[rule], y)
    codes = p_bits(y, rule)
    assert torch.equal(codes, (w.double() - P_RULE_TABLE[rule].magic).to(torch.int32))
    exact = p_bits(y, "exact")
    assert codes.min() >= 0 and codes.max() == 120                # 2^8 at y = 0
    normal = y >= -14.0                  # 2^(y + 8) in E4M3's normal range: one step at most
    assert (codes - exact)[normal].abs().max() <= 1
    assert torch.equal(codes[y <= Y_FLOOR], torch.zeros_like(codes[y <= Y_FLOOR]))


def _steps_as_text(rule, precision):
    """The step list with constants as the float32 (or half) values the hardware sees."""
    def value(a):
        if isinstance(a, str):
            return a
        return struct.unpack("<e", struct.pack("<e", a))[0] if precision == "f16" else float(torch.tensor(a).float())
    return [(s.op, s.out, tuple(value(a) for a in s.args)) for s in P_RULE_TABLE[rule].steps]


def _ptx_float(tok: str) -> float:
    return struct.unpack("<f", struct.pack("<I", int(tok[2:], 16)))[0]


@pytest.mark.parametrize("rule", LEAN_RULES)
def test_ptx_emits_exactly_the_steps(rule):
    prog = ptx_program()
    y = prog.reg("f32")
    P.emit_p_code(prog, y, rule)
    names = {str(y): "y"}
    got = []
    for line in prog.body:
        op, rest = line.strip().rstrip(";").split(None, 1)
        dst, *srcs = [t.strip() for t in rest.split(",")]
        args = tuple(names[s] if s in names else _ptx_float(s) for s in srcs)
        out = _name_of(rule, len(got))
        names[dst] = out
        got.append((op.split(".")[0], out, args))
    assert got == _steps_as_text(rule, "f32")


def _name_of(rule, i):
    return P_RULE_TABLE[rule].steps[i].out


def test_ptx_half_pair_emits_exactly_the_steps():
    rule = HALF_RULES[0]
    prog = ptx_program()
    lo, hi = prog.reg("f32"), prog.reg("f32")
    k = P.half_constants(prog, rule)
    start = len(prog.body)
    P.emit_p_code_pair(prog, lo, hi, k, rule)
    consts = {}
    for line in prog.body[:start]:                              # mov.b32 %b, 0xHHHHHHHH
        _, dst, imm = re.split(r"[\s,;]+", line.strip())[:3]
        consts[dst] = struct.unpack("<e", struct.pack("<H", int(imm, 16) & 0xFFFF))[0]
    names, got = {}, []
    for i, line in enumerate(prog.body[start:]):
        op, rest = line.strip().rstrip(";").split(None, 1)
        dst, *srcs = [t.strip() for t in rest.split(",")]
        if i == 0:
            assert op == "cvt.rn.f16x2.f32" and srcs == [str(hi), str(lo)]
            got.append(("round", "y", ("y",)))
            names[dst] = "y"
            continue
        args = tuple(names[s] if s in names else consts[s] for s in srcs)
        out = _name_of(rule, i)
        names[dst] = out
        got.append((op.split(".")[0], out, args))
    assert got == _steps_as_text(rule, "f16")


def _gfx_float(tok: str) -> float:
    v = int(tok, 16) if tok.startswith("0x") else None
    return struct.unpack("<f", struct.pack("<I", v))[0] if v is not None else float(tok)


@pytest.mark.parametrize("rule", LEAN_RULES)
def test_gfx950_emits_exactly_the_steps(rule):
    prog = gfx950_program()
    y = prog.aligned("v", 2, 2)
    consts = G.load_constants(prog, rule)
    start = len(prog.body)
    G.emit_p_codes(prog, y, rule, consts)
    movs = {}                                   # v_mov_b32 vN, literal: what each register holds
    for line in prog.body[:start]:
        _, reg, lit = re.split(r"[\s,]+", line.strip())[:3]
        movs[int(reg[1:])] = _gfx_float(lit)
    pair_value = {f"v[{i}:{i + 1}]": v for i, v in movs.items() if movs.get(i + 1) == v and i % 2 == 0}
    names = {f"v[{y[0].index}:{y[1].index}]": "y", f"v{y[0].index}": "y", f"v{y[1].index}": "y"}
    got = []
    body = [line.strip() for line in prog.body[start:]]
    i = 0
    while i < len(body):
        op, rest = body[i].split(None, 1)
        op = op.removesuffix("_e32").removesuffix("_e64")
        toks = [t.strip() for t in rest.split(",")]
        out = _name_of(rule, len(got))
        if op == "v_max_f32":                  # one a score: the pair's two lanes in turn
            op2, rest2 = body[i + 1].split(None, 1)
            op2 = op2.removesuffix("_e32").removesuffix("_e64")
            toks2 = [t.strip() for t in rest2.split(",")]
            assert op2 == op and _gfx_float(toks[1]) == _gfx_float(toks2[1])
            got.append(("max", out, (names[toks[2]], _gfx_float(toks[1]))))
            lo, hi = int(toks[0][1:]), int(toks2[0][1:])
            names.update({f"v[{lo}:{hi}]": out})
            i += 2
            continue
        d, srcs = toks[0], [names.get(t, pair_value.get(t)) for t in toks[1:]]
        if op == "v_pk_add_f32" and isinstance(srcs[1], float) and srcs[1] < 0 and srcs[1] != MAGIC:
            got.append(("sub", out, (srcs[0], -srcs[1])))
        elif op == "v_pk_add_f32" and isinstance(srcs[1], float) and srcs[1] == -MAGIC:
            got.append(("sub", out, (srcs[0], MAGIC)))
        elif op == "v_pk_add_f32":
            got.append(("add", out, tuple(srcs)))
        elif op == "v_pk_fma_f32" and srcs[1] == -1.0:
            got.append(("sub", out, (srcs[2], srcs[0])))
        else:
            assert op == "v_pk_fma_f32", op
            got.append(("fma", out, tuple(srcs)))
        names[d] = out
        i += 1
    assert got == _steps_as_text(rule, "f32")


@triton.jit
def _codes_kernel(Y, OUT, n, RULE: tl.constexpr, EXACT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    y = tl.load(Y + offs, mask=m, other=0.0)
    if EXACT:
        codes = exact_p_bits(y + 8.0)
    else:
        codes = lean_p_bits(y, RULE)
    tl.store(OUT + offs, codes, mask=m)


@pytest.mark.skipif(HAS_GPU, reason="the interpreter check; GPU runs are covered by the kernel tests")
@pytest.mark.parametrize("rule", P_RULES)
def test_triton_codes_equal_the_spec_in_the_interpreter(rule):
    y = _y_grid()
    if rule == "exact":
        y = y.clamp(min=-16.0)            # the exact rule has no floor: keep 2^(y+8) in E4M3's range
    out = torch.empty(y.numel(), dtype=torch.int32)
    _codes_kernel[(triton.cdiv(y.numel(), 1024),)](y, out, y.numel(), P_RULE_IDS[rule], rule == "exact", 1024)
    # the interpreter rounds a*b+c twice, and float32 y + 8 is exact here
    assert torch.equal(out, p_bits(y, rule, fused=False)), rule
    assert float(P_OFFSET_LOG2) == 8.0


def test_lean_rule_constants_pinned():
    """The lean rules' coefficients and codes pinned independently of their definitions: the
    float32 bit patterns of the polynomial coefficients, the E4M3 codes of a few y worked out
    by hand, and a digest of every code on the grid (a coefficient moved by 0.1% changes them)."""
    import hashlib
    from zyfa.spec import rules as R
    from zyfa.spec import constants as C
    bits = {n: struct.unpack("<I", struct.pack("<f", getattr(R, n)))[0] for n in ("LEAN_CUBIC_A", "LEAN_CUBIC_B", "LEAN_QUAD_K")}
    assert bits == {"LEAN_CUBIC_A": 0x3E9C1190, "LEAN_CUBIC_B": 0x3D9EF9F6, "LEAN_QUAD_K": 0x3EB0A3D7}, {k: hex(v) for k, v in bits.items()}
    assert (C.P_OFFSET_LOG2, C.P_ONE_BITS, C.Y_FLOOR, C.MAGIC, C.RESCALE_THRESHOLD) == (8, 120, -15.0, 1.5 * 2 ** 23, 8.0)
    # 2^(y + 8) by hand: y = -0.3: 2^7.7 = 207.9 -> 208 = 2^7 (1 + 5/8): code 8 * 14 + 5 = 117;
    # y = -1.7: 2^6.3 = 78.8 -> 80 = 2^6 (1 + 2/8): 106; y = -2.5: 2^5.5 = 45.25 -> 44 (spacing 4): 99
    # (lean, round(8 y + 120) = 100); y = -5.123: 2^2.877 = 7.35 -> 7.5 = 2^2 (1 + 7/8): 79;
    # y = -9.9: 2^-1.9 = 0.268 -> 0.25 (1 + 1/8): 41; y = -13.25: 2^-5.25 = 0.0263 -> 0.02734 =
    # 2^-6 (1 + 6/8): 13 (lean 14); y = -14.6: 2^-6.6 = 0.0103, subnormal, 0.0103 * 2^9 = 5.3: 5
    # (the floor-based rules: 2^-7 (1 + 0.7 * 3/4..) -> 3, below the floor's normal range)
    hand = {-0.3: [117, 118, 117, 117, 117], -1.7: [106] * 5, -2.5: [99, 100, 99, 99, 99],
            -5.123: [79] * 5, -9.9: [41] * 5, -13.25: [13, 14, 13, 13, 13], -14.6: [5, 3, 3, 3, 3]}
    for y, want in hand.items():
        got = [int(p_bits(torch.tensor([y]), r)) for r in P_RULES]
        assert got == want, (y, dict(zip(P_RULES, got)))
    y = torch.linspace(-17.0, 0.0, 20001, dtype=torch.float64)
    y = torch.cat([y, torch.arange(-17.0, 0.5, 0.5, dtype=torch.float64)]).float()
    digests = {r: hashlib.sha256(p_bits(y, r).numpy().astype("int32").tobytes()).hexdigest()[:16]
               for r in LEAN_RULES + HALF_RULES}
    assert digests == {"lean": "4c3d101ee8b5796f", "lean_quad": "8358199fd576ddb0",
                       "lean_cubic": "13d3c8426b6c9c80", "lean_cubic_f16": "4c0316bd84d6bf58"}, digests
