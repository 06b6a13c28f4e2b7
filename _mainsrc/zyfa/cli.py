"""Command line: `zyfa demo`, `zyfa bench`. (Compile checks for sm90 / gfx950 without a GPU:
`python -m zyfa.verify.triton_compile sm90`.)"""
from __future__ import annotations

import argparse
import sys


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of tokens, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def main(argv=None) -> int:
    from . import __version__
    ap = argparse.ArgumentParser(prog="zyfa", description="FP8/BF16 prefill attention")
    ap.add_argument("--version", action="version", version=f"zyfa {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="run zyfa on realistic activations: error vs float64, speed on a GPU")
    d.add_argument("--seqlen", type=_positive_int, default=None,
                   help="tokens (default: 16384 on a GPU, 256 on the CPU)")
    sub.add_parser("bench", help="benchmark zyfa beside FA3, cuDNN and SDPA on a GPU (zyfa bench --help)",
                   add_help=False)
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:
        from .bench.run import main as bench
        return bench(argv[1:])
    a = ap.parse_args(argv)
    if a.cmd == "demo":
        from .demo import run
        run(a.seqlen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
