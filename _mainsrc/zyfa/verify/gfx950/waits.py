"""The emulator's check of memory counters: code must ``s_waitcnt`` before it touches what a
memory instruction is still writing.

The emulator completes every load at issue, so a kernel that reads a load's destination too
early still gets the right answer there, and garbage on hardware. ``Waits`` keeps, per wave,
the memory instructions issued and not yet waited for, in issue order, with the registers
each will write:
  vmcnt     global_* and buffer_* loads (returned in order)
  lgkmcnt   ds_* (LDS, in order) and s_load_* (scalar memory)
``s_waitcnt vmcnt(N)`` / ``lgkmcnt(N)`` retires all but the N newest of that counter. An
instruction that reads or writes a register an outstanding load will write raises
``WaitError``, and so does an ``s_barrier`` with an LDS write still outstanding (the barrier
does not wait for memory: other waves could read stale bytes). Scalar loads return out of
order on hardware; the check treats them in order, so it is exact for lgkmcnt(0) and lenient
otherwise.
"""
from __future__ import annotations

import re

_REG = re.compile(r"^([sva])(?:(\d+)|\[(\d+):(\d+)\])$")
_COUNT = re.compile(r"(vmcnt|lgkmcnt)\((\d+)\)")
NO_DESTINATION = ("global_store", "buffer_store", "ds_write", "s_waitcnt", "s_barrier", "s_branch", "s_cbranch",
                  "s_nop", "s_setprio", "s_endpgm", "s_sleep")


class WaitError(RuntimeError):
    pass


def registers(tok: str) -> set:
    """(file, index) of every register a token names; nothing for constants and labels."""
    m = _REG.match(tok.lstrip("-"))
    if not m:
        return set()
    lo = int(m.group(2) if m.group(2) is not None else m.group(3))
    hi = lo if m.group(2) is not None else int(m.group(4))
    return {(m.group(1), i) for i in range(lo, hi + 1)}


def counter(op: str) -> str | None:
    if op.startswith(("global_load", "buffer_load")):
        return "vm"
    if op.startswith(("ds_", "s_load")):
        return "lgkm"
    return None


class Waits:
    def __init__(self):
        self.outstanding = []          # (counter, registers it writes, is an LDS write, instruction text)

    def before(self, ins) -> None:
        """Check an instruction against the outstanding loads, and apply s_waitcnt."""
        if ins.op == "s_waitcnt":
            for name, n in _COUNT.findall(ins.line):
                self._retire(name[:-3], int(n))
            return
        if ins.op == "s_barrier":
            pending = [text for kind, _, lds_write, text in self.outstanding if lds_write]
            if pending:
                raise WaitError(f"s_barrier with an LDS write not waited for ({pending[0]}): other waves could "
                                f"read the old bytes")
            return
        busy = {r: text for _, regs, _, text in self.outstanding for r in regs}
        for r in (r for tok in ins.args for r in registers(tok)):      # read or written: both race
            if r in busy:
                raise WaitError(f"{ins.line!r} touches {r[0]}{r[1]}, which {busy[r]!r} is still writing "
                                f"(no s_waitcnt in between)")

    def after(self, ins) -> None:
        """Record a memory instruction just issued."""
        kind = counter(ins.op)
        if kind is None:
            return
        writes_lds = ins.op.startswith("ds_write")
        dests = set() if ins.op.startswith(NO_DESTINATION) else registers(ins.args[0])
        self.outstanding.append((kind, dests, writes_lds, ins.line))

    def _retire(self, kind: str, keep: int) -> None:
        mine = [i for i, o in enumerate(self.outstanding) if o[0] == kind]
        drop = set(mine[:max(len(mine) - keep, 0)])
        self.outstanding = [o for i, o in enumerate(self.outstanding) if i not in drop]
