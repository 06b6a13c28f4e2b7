"""Command line: `zyfa demo`, `zyfa compile-check`."""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="zyfa", description="FP8/BF16 prefill attention")
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="run zyfa on realistic activations: error vs float64, speed on a GPU")
    d.add_argument("--seqlen", type=int, default=None)
    c = sub.add_parser("compile-check", help="compile the FP8 kernel for sm90 or gfx950 on this machine")
    c.add_argument("target", choices=["sm90", "gfx950"])
    a = ap.parse_args(argv)
    if a.cmd == "demo":
        from .demo import run
        run(a.seqlen)
    elif a.cmd == "compile-check":
        from .triton_kernels.compile_check import main as cc
        cc([a.target])
    return 0


if __name__ == "__main__":
    sys.exit(main())
