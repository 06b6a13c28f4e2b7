"""A consumer's block loop as ptxas scheduled it: its instructions by mnemonic, and its static
cycles (the stall counts ptxas wrote, summed: one warp's issue time, a lower bound) by
section: to the first S MMA, S issued, S done to P V done, P V done to the back-edge; with
--timeline every instruction with its cycle. For predicting what a schedule change does
before timing it. --skip leaves out a path that the steady blocks branch
over (the causal band's mask: see the loop's forward branches in --timeline).

    python bench/sass_loop.py bf16 128 128                    # the dense 16-bit d128 kernel
    python bench/sass_loop.py bf16 128 128 --packed --timeline
    python bench/sass_loop.py fp8 128 128                     # the FP8 kernel, exact rule
    python bench/sass_loop.py --sass k.sass --gmmas 16        # any cuobjdump -sass output
"""
from __future__ import annotations

import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from zyfa.asm.ptx import attention as attn  # noqa: E402
from zyfa.verify.ptx import sass as S  # noqa: E402
from zyfa.asm.ptx.assemble import assemble  # noqa: E402


def generated(dtype: str, dqk: int, dv: int, packed: bool, causal: bool) -> tuple[str, int]:
    """SASS of a generated kernel, and the MMAs of one S (k-steps of 32 for FP8, 16 else): the
    smallest loop that issues at least those is the block loop."""
    if dtype == "fp8":
        return assemble(attn.attention_kernel("exact", causal, dqk, "sm_90a", packed)[1]).sass(), dqk // 32
    return assemble(attn.attention_kernel_16(dtype, causal, dqk, dv, "sm_90a", packed)[1]).sass(), dqk // 16


def sections(loop: list[S.Instruction]) -> list[tuple[str, list[S.Instruction]]]:
    """The loop cut at its first MMA, its S wait (DEPBAR 0x1) and its P V wait (DEPBAR 0x0)."""
    def first(pred, start=0):
        return next((k for k in range(start, len(loop)) if pred(loop[k])), None)
    mma = first(lambda i: "GMMA" in i.mnemonic)
    s_done = first(lambda i: "DEPBAR.LE gsb0, 0x1" in i.text)
    pv_done = first(lambda i: "DEPBAR.LE gsb0, 0x0" in i.text, s_done or 0)
    cuts = [("loop head", 0), ("S issued", mma), ("softmax to P V done", s_done), ("to the back-edge", pv_done)]
    cuts = [(name, k) for name, k in cuts if k is not None] + [("", len(loop))]
    return [(name, loop[k:cuts[n + 1][1]]) for n, (name, k) in enumerate(cuts[:-1])]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dtype", nargs="?", default="bf16", choices=("bf16", "f16", "fp8"))
    ap.add_argument("dqk", nargs="?", type=int, default=128)
    ap.add_argument("dv", nargs="?", type=int, default=None)
    ap.add_argument("--packed", action="store_true")
    ap.add_argument("--not-causal", action="store_true")
    ap.add_argument("--sass", help="read this cuobjdump -sass output instead of generating a kernel")
    ap.add_argument("--gmmas", type=int, help="with --sass: the fewest MMAs the loop issues (one S's)")
    ap.add_argument("--skip", nargs="*", default=[], help="address ranges LO-HI (hex) left out")
    ap.add_argument("--timeline", action="store_true")
    a = ap.parse_args(argv)
    if a.sass:
        if not a.gmmas:
            ap.error("--sass needs --gmmas")
        with open(a.sass) as f:
            text, gmmas = f.read(), a.gmmas
    else:
        text, gmmas = generated(a.dtype, a.dqk, a.dv or a.dqk, a.packed, not a.not_causal)
    skips = [tuple(int(x, 16) for x in r.split("-")) for r in a.skip]
    loop = [i for i in S.block_loop(S.instructions(text), gmmas) if not any(lo <= i.addr <= hi for lo, hi in skips)]
    print(f"loop {loop[0].addr:#x}..{loop[-1].addr:#x}: {len(loop)} instructions, "
          f"{S.static_cycles(loop)} static cycles")
    for name, part in sections(loop):
        print(f"  {name:22s} {len(part):4d} instructions {S.static_cycles(part):5d} cycles")
    mix = collections.Counter(i.mnemonic.split(".")[0] for i in loop)
    print("  " + ", ".join(f"{m} {n}" for m, n in mix.most_common()))
    if a.timeline:
        t = 0
        for i in loop:
            wait = "".join(str(k) for k in range(6) if i.wait_mask >> k & 1)
            print(f"{i.addr:6x} {t:5d} S{i.stall:<2d} {'w' + wait if wait else '':7s} {i.text}")
            t += i.stall
    return 0


if __name__ == "__main__":
    sys.exit(main())
