"""Every P rule in the spec's registry (zyfa.spec.rules.P_RULES) has its own code in each path
that takes it: the Triton kernel, the PTX generator and the gfx950 generator. A rule a path
does not know is an error when the code is compiled or generated, naming the rule, never
another rule's code."""
import dataclasses
import itertools

import pytest
import torch
import triton
import triton.language as tl

from conftest import DEVICE
from zyfa.asm.gfx950 import attention as gfx950_attention
from zyfa.asm.gfx950 import lean_p as G
from zyfa.asm.gfx950.target import program as gfx950_program
from zyfa.asm.ptx import attention as ptx_attention
from zyfa.asm.ptx import lean_p as P
from zyfa.asm.ptx.target import program as ptx_program
from zyfa.spec import rules as R
from zyfa.triton_kernels.p_rules import P_RULE_IDS, p_fp8

MADE_UP = "lean_made_up"          # a rule no path has code for


def _all_distinct(codes: dict) -> None:
    for a, b in itertools.combinations(codes, 2):
        assert codes[a] != codes[b], (a, b)


@triton.jit
def _p_kernel(Y, OUT, P_RULE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    p = p_fp8(tl.load(Y + offs), P_RULE)
    tl.store(OUT + offs, p.to(tl.int8, bitcast=True))


def _triton_codes(rule_id: int) -> torch.Tensor:
    y = torch.linspace(-15.0, 0.0, 1024, device=DEVICE)
    out = torch.empty(1024, dtype=torch.int8, device=DEVICE)
    _p_kernel[(1,)](y, out, rule_id, 1024)
    return out.cpu()


def test_triton_has_code_of_its_own_for_every_rule():
    codes = {rule: _triton_codes(i).tolist() for rule, i in P_RULE_IDS.items()}
    assert set(codes) == set(R.P_RULES)
    _all_distinct(codes)


def test_triton_refuses_a_rule_without_a_branch(monkeypatch):
    """A rule added to the registry takes the next id; the kernel's compilation fails naming
    it rather than run another rule's arithmetic."""
    monkeypatch.setattr(R, "P_RULES", R.P_RULES + (MADE_UP,))
    with pytest.raises(Exception) as info:
        _triton_codes(len(R.P_RULES) - 1)
    # the interpreter raises the assertion itself; the compiler wraps it in a CompilationError
    # a call level (the message is the innermost cause's)
    chain, e = [], info.value
    while e is not None:
        chain.append(str(e))
        e = e.__cause__ or e.__context__
    assert any(MADE_UP in m for m in chain), chain


def _without_name(kernel: tuple[str, str]) -> str:
    name, text = kernel
    return text.replace(name, "")


def test_ptx_has_code_of_its_own_for_every_rule():
    assert set(ptx_attention.ATTENTION_RULES) == set(R.P_RULES)
    _all_distinct({r: _without_name(ptx_attention.attention_kernel(r, True)) for r in R.P_RULES})
    _all_distinct({r: _without_name(P.p_codes_kernel(r)) for r in P.PTX_RULES})


def test_ptx_refuses_a_rule_it_does_not_know():
    prog = ptx_program()
    y, y_hi = prog.reg("f32"), prog.reg("f32")
    for generate in (lambda r: ptx_attention.attention_kernel(r, True), P.p_codes_kernel,
                     lambda r: P.emit_p_code(prog, y, r), lambda r: P.half_constants(prog, r),
                     lambda r: P.emit_p_code_pair(prog, y, y_hi, {}, r)):
        with pytest.raises(ValueError, match=MADE_UP):
            generate(MADE_UP)
    for half in R.HALF_RULES:                     # and a rule of the other precision
        with pytest.raises(ValueError, match=half):
            P.emit_p_code(prog, y, half)
    for lean in R.LEAN_RULES:
        with pytest.raises(ValueError, match=lean):
            P.half_constants(prog, lean)


def test_ptx_half_rules_each_take_their_own_constants(monkeypatch):
    """A second half rule, its coefficients unlike the first's, gets its own constants and
    instructions (the generator once defaulted to the first half rule's)."""
    first = R.P_RULE_TABLE[R.HALF_RULES[0]]
    steps = tuple(dataclasses.replace(s, args=tuple(a if isinstance(a, str) or a in (0.5, 8.0) else a + 1.0
                                                       for a in s.args)) for s in first.steps)
    second = dataclasses.replace(first, name="half_second", steps=steps)
    monkeypatch.setattr(P, "P_RULE_TABLE", {**P.P_RULE_TABLE, second.name: second})
    monkeypatch.setattr(P, "HALF_RULES", P.HALF_RULES + (second.name,))
    _all_distinct({r: _without_name(P.p_codes_kernel(r)) for r in (first.name, second.name)})
    assert set(P.half_constants(ptx_program(), second.name)) != set(P.half_constants(ptx_program(), first.name))


def test_gfx950_has_code_of_its_own_for_every_lean_rule():
    _all_distinct({r: _without_name(gfx950_attention.attention_kernel(r, True)) for r in R.LEAN_RULES})
    _all_distinct({r: _without_name(G.p_codes_kernel(r)) for r in R.LEAN_RULES})


def test_gfx950_refuses_a_rule_it_does_not_know():
    """The made-up rule, and the registry's rules the gfx950 generator does not take."""
    prog = gfx950_program()
    y = prog.aligned("v", 2, 2)
    for rule in (MADE_UP,) + tuple(r for r in R.P_RULES if r not in R.LEAN_RULES):
        for generate in (lambda r: gfx950_attention.attention_kernel(r, True), G.p_codes_kernel,
                         lambda r: G.load_constants(prog, r), lambda r: G.emit_p_codes(prog, y, r, G.Constants({}))):
            with pytest.raises(ValueError, match=rule):
                generate(rule)
