"""Lab (not for the package), session n: one Mistral-7B 16K launch of the INT8 Q.K^T kernel, the
E4M3 default kernel or the fast mode's (argv[1]: int8 | e4m3 | fast), after a warm-up launch,
for Nsight Compute (notes/scripts/int8_profile.sh): what still holds the INT8 kernel below the
E4M3 one at the same shape (issue slots, stall reasons, instructions issued)."""
import sys

import torch

import zyfa
from zyfa.activations import make

which = sys.argv[1]
q, k, v = make("realistic", 1, 16384, 32, 8, 128, 128, seed=7, device="cuda")
if which == "int8":
    x = zyfa.quantize_int8_qk(q, k, v)
    kw = dict()
else:
    x = zyfa.quantize_fp8(q, k, v)
    kw = dict(p_rule="exact", ref_rule="running") if which == "fast" else dict(p_rule="exact")
for _ in range(2):
    zyfa.flash_attn_func(**x.kwargs(), causal=True, backend="ptx", **kw)
torch.cuda.synchronize()
