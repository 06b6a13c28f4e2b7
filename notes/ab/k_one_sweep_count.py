"""Dynamic warp-instructions an element of the k kernels' SASS (k_one_sweep.py's sass/ files).

Fast path: every instruction before the kernel's unconditional EXIT, less the ranges a forward
branch skips when they hold a CALL (the IEEE / float64 division slow paths, never taken for
normal inputs); loop bodies (back-edges) times their trip count (NSUB_K tiles a sweep).
Per element = instructions a warp x warps / elements a program (128 keys x BD, padding included).

    python3 notes/ab/k_one_sweep_count.py /tmp/ksweep/sass
"""
import collections
import os
import re
import sys

sys.path.insert(0, "/work/shared/tools")
from sass_mix import klass, parse  # noqa: E402


def dynamic(path, trips):
    ins = parse(path)
    end = next(a for a, op, t in ins if op == "EXIT" and not t.lstrip().startswith("@"))
    skip, loops = [], []
    for a, op, t in ins:
        m = re.search(r"BRA (?:!?U?P\d, )?(0x[0-9a-f]+)", t)
        if not (op.startswith("BRA") and m) or a > end:
            continue
        tgt = int(m.group(1), 16)
        if tgt <= a:
            if tgt != a:
                loops.append((tgt, a))
        elif any(o.startswith("CALL") and a < x < tgt for x, o, _ in ins):
            skip.append((a + 16, tgt - 16))
    c = collections.Counter()
    for a, op, _ in ins:
        if a > end or any(lo <= a <= hi for lo, hi in skip):
            continue
        w = trips if any(lo <= a <= hi for lo, hi in loops) else 1
        c[klass(op)] += w
    return c, loops


def main(d):
    for f in sorted(os.listdir(d)):
        if not f.endswith(".sass"):
            continue
        model, rest = f.split("__")
        bd = 128 if model == "Mistral" else 256
        warps = int(re.search(r"_w(\d+)", f).group(1))
        trips = 128 // (2048 // bd)
        c, loops = dynamic(os.path.join(d, f), trips)
        tot = sum(c.values())
        per = tot * warps / (128 * bd)
        top = ", ".join(f"{k} {v * warps / (128 * bd):.3f}" for k, v in c.most_common(6))
        print(f"{f:42s} loops {len(loops)} instr/warp {tot:6d}  per element {per:.3f}   [{top}]")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/ksweep/sass")
