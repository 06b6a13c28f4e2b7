"""Run 58c (session p): racecheck over the INT8 Q.K^T kernel in the long-key layout (d128,
int8_grid_long.diff) at a few hundred keys a row, where racecheck finishes: layout.LONG_KEYS is
lowered for this process only, so calls of 1,024+ keys take the long layout's kernel (any key
count runs it; 16K is only where it pays). The E4M3 long kernel beside it as the known-clean
anchor. bench/sanitize.py's checks (spec bound, float64) on each.

    compute-sanitizer --tool racecheck python3 notes/scripts/racecheck_long.py
"""
import importlib.util
import os
import sys

import zyfa.asm.ptx.layout as layout

layout.LONG_KEYS = 1024
assert layout.long_keys(128, 128, 1100) and not layout.long_keys(128, 128, 300)
spec = importlib.util.spec_from_file_location("sanitize", os.path.join(os.path.dirname(__file__), "..", "..",
                                                                       "bench", "sanitize.py"))
san = importlib.util.module_from_spec(spec)
spec.loader.exec_module(san)
san.CASES = [("ptx", "int8", (1, 200, 1100, 2, 1, 128, 128), True),
             ("ptx", "int8", (1, 130, 1024, 2, 2, 128, 128), False),
             ("ptx", "fp8", (1, 200, 1100, 2, 1, 128, 128), True, "exact")]
sys.argv = [sys.argv[0], "--backends", "ptx", "--dtypes", "fp8,int8", "--ref-rules", "block"]
sys.exit(san.main())
