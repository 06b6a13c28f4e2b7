"""Target-neutral pieces of a generated kernel: typed virtual registers, instructions from
an op table, labels, and register declarations written once the body is known."""
from __future__ import annotations

import dataclasses
from typing import Callable


@dataclasses.dataclass(frozen=True)
class Reg:
    """A virtual register: its kind (a key of the target's register table) and number."""
    kind: str
    index: int
    name: str

    def __str__(self) -> str:
        return self.name


@dataclasses.dataclass(frozen=True)
class Target:
    """What a program needs from an instruction set.

    ops:      op name -> format string over the operands ("{0}", "{1}", ...)
    reg_name: (kind, index) -> the register's name in the text
    declare:  (kind, count) -> the declaration line(s) for registers 0..count-1 of a kind
    kinds:    the register kinds the target has
    """
    ops: dict
    reg_name: Callable[[str, int], str]
    declare: Callable[[str, int], str]
    kinds: tuple


class Program:
    """The body of one kernel, built instruction by instruction."""

    def __init__(self, target: Target):
        self.target = target
        self.body: list[str] = []
        self._count: dict[str, int] = {}
        self._labels: set[str] = set()

    def reg(self, kind: str) -> Reg:
        if kind not in self.target.kinds:
            raise ValueError(f"register kind {kind!r} unknown; the target has {self.target.kinds}")
        i = self._count.get(kind, 0)
        self._count[kind] = i + 1
        return Reg(kind, i, self.target.reg_name(kind, i))

    def regs(self, kind: str, n: int) -> list[Reg]:
        return [self.reg(kind) for _ in range(n)]

    def aligned(self, kind: str, n: int, align: int = 2) -> list[Reg]:
        """n consecutive registers starting at a multiple of ``align`` (register tuples:
        64-bit values, vector loads), skipping what the alignment needs."""
        while self._count.get(kind, 0) % align:
            self.reg(kind)
        return self.regs(kind, n)

    def emit(self, op: str, *operands, guard: Reg | str | None = None) -> None:
        """Append one instruction; ``guard`` predicates it (``@p``; a string such as ``"!%p_0"``)."""
        try:
            fmt = self.target.ops[op]
        except KeyError:
            raise ValueError(f"op {op!r} is not in the target's op table") from None
        text = fmt.format(*operands)
        self.body.append(f"\t{'@' + str(guard) + ' ' if guard is not None else ''}{text}")

    def label(self, name: str) -> str:
        if name in self._labels:
            raise ValueError(f"label {name!r} defined twice")
        self._labels.add(name)
        self.body.append(f"{name}:")
        return name

    def comment(self, text: str) -> None:
        self.body.append(f"\t// {text}")

    def declarations(self) -> list[str]:
        """One declaration per register kind used, sized by what the body used."""
        return [self.target.declare(kind, n) for kind, n in sorted(self._count.items())]

    def register_counts(self) -> dict[str, int]:
        return dict(self._count)
