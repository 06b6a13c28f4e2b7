"""Lab (not for the package), branch decode-ptx: how fast warps transpose key-major E4M3 V blocks
in shared memory (zyfa.verify.ptx.vt_block: ldmatrix .trans, PRMT, stmatrix, 512 bytes a warp a
round), against what an E4M3 decode kernel needs of an SM (V at half of ~3 TB/s over 132 SMs:
~11.4 bytes a ns an SM). Prints bytes a ns an SM for 1-8 warps a CTA, CTAs filling the SMs."""
import torch

from zyfa.device import sm_count
from zyfa.verify.ptx.vt_block import vt_block

dev = torch.device("cuda")
sms = sm_count(dev)
v = torch.randint(0, 256, (16, 32), dtype=torch.uint8, device=dev)
rounds = 4000
for warps in (1, 2, 4, 8):
    for per_sm in (1, 2):
        ctas = sms * per_sm
        vt_block(v, ctas, warps, 10)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        vt_block(v, ctas, warps, rounds)
        end.record()
        end.synchronize()
        ns = start.elapsed_time(end) * 1e6
        rate = ctas * warps * rounds * 512 / ns / sms
        print(f"{warps} warps x {per_sm} CTAs an SM: {rate:6.1f} bytes/ns an SM ({rate / 11.4:.1f}x a decode kernel's need)")
