"""SASS as data: each instruction's address and text, and the schedule ptxas writes into its
control bits (the cycles before the next instruction may issue, the scoreboards it sets and
waits on); a consumer's block loop found by its HGMMAs. For reading a loop's static schedule
before a run (bench/sass_loop.py) and for the tests that check the loops."""
from __future__ import annotations

import dataclasses
import re

# cuobjdump prints each 128-bit instruction as two 64-bit words; the control bits are the
# high word's bits 41-62: stall 4, yield 1, write scoreboard 3, read scoreboard 3, wait mask 6
_FIRST = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s*/\*\s*0x[0-9a-f]+\s*\*/\s*$")
_SECOND = re.compile(r"^\s*/\*\s*(0x[0-9a-f]+)\s*\*/\s*$")
NO_SCOREBOARD = 7


@dataclasses.dataclass(frozen=True)
class Instruction:
    addr: int
    text: str                 # guard, mnemonic and operands
    stall: int                # cycles before the warp's next instruction may issue, at least
    write_scoreboard: int     # the scoreboard a variable-latency result sets (7: none)
    read_scoreboard: int      # the scoreboard that frees its source registers (7: none)
    wait_mask: int            # scoreboards waited on before it issues (bit i: scoreboard i)

    @property
    def mnemonic(self) -> str:
        return re.sub(r"^@!?U?P[T\d]\s+", "", self.text).split(" ")[0]


def instructions(sass: str) -> list[Instruction]:
    """The instructions of cuobjdump's SASS text (every function in it, in order)."""
    out, first = [], None
    for line in sass.splitlines():
        m = _FIRST.match(line)
        if m:
            first = (int(m.group(1), 16), m.group(2))
            continue
        m = _SECOND.match(line)
        if m and first:
            ctrl = int(m.group(1), 16) >> 41
            out.append(Instruction(first[0], first[1], ctrl & 0xF, (ctrl >> 5) & 7, (ctrl >> 8) & 7,
                                   (ctrl >> 11) & 0x3F))
            first = None
    return out


def block_loop(code: list[Instruction], gmmas: int) -> list[Instruction]:
    """The smallest loop (a backward branch and its target) that issues at least ``gmmas``
    warpgroup MMAs (HGMMA, QGMMA, IGMMA): a consumer's block loop, every path through it."""
    best = None
    for ins in code:
        back = re.fullmatch(r"(?:@!?U?P\d )?BRA (0x[0-9a-f]+)", ins.text)
        if back and int(back.group(1), 16) < ins.addr:
            body = [i for i in code if int(back.group(1), 16) <= i.addr <= ins.addr]
            if sum("GMMA" in i.mnemonic for i in body) >= gmmas and (best is None or len(body) < len(best)):
                best = body
    if best is None:
        raise ValueError(f"no loop with {gmmas} warpgroup MMAs")
    return best


def static_cycles(code: list[Instruction]) -> int:
    """The stall counts summed: one warp's issue time for ``code`` run straight through, a lower
    bound (waits on scoreboards, barriers and other warps come on top)."""
    return sum(i.stall for i in code)
