# run 50 (session m): run 49 again after the FP8 passes went back to the 2-D butterflies (IN_RUNS
# only for the INT8 codes; run 49: the FP8 rotated call 23-32% slower with runs): the quantizers'
# GPU tests and quant_issue_ab.py, no bars. Carry .whl and build/lab.
NO_BARS=1 source notes/scripts/run49.sh
