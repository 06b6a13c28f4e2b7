"""Same as `zyfa bench` (see zyfa/bench/run.py): python bench/run.py --cases all"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from zyfa.bench.run import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
