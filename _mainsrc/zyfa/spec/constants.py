"""The numbers every zyfa path shares: the FP8 probability's offset and floor, the magic
numbers of the rounding trick, the reference's floor and lazy-rescale threshold, and the
logarithm constants. Defined here once; kernels and generators read them from here."""
from __future__ import annotations

E4M3_MAX = 448.0             # largest finite E4M3fn value (bits 0x7E)
INT8_MAX = 127               # the INT8 Q.K^T mode's largest code
AMAX_FLOOR = 1e-12           # a quantizer's amax floor: an all-zero head still gets a finite scale
P_OFFSET_LOG2 = 8            # P is stored as 2^(y + 8): a block's largest value lands on 256
P_ONE_BITS = 120             # E4M3 bits of 2^8 (exponent 15, mantissa 0)
Y_FLOOR = -15.0              # clamp for y: 8 * Y_FLOOR + 120 == 0, so lean codes are >= 0
MAGIC = 12582912.0           # 1.5 * 2^23: x + MAGIC leaves round-half-even(x) in the low bits
MAGIC_BITS = 0x4B400000      # float32 bits of MAGIC
F16_MAGIC = 1536.0           # 1.5 * 2^10: the magic number of half precision (ulp 1 on [1024, 2048))
F16_MAGIC_BITS = 0x6600      # half bits of F16_MAGIC

KEY_BLOCK = 128             # keys a block of the FP8 spec: a reference and a P.V accumulator each
                             # (the gfx950 kernel, ZYFA's design, takes 64: it says so where it runs)
NEG_FLOOR = -1.0e30          # finite stand-in for -inf in references, so 2^(a - b) never sees inf - inf
RESCALE_THRESHOLD = 8.0      # log2 units a block max may pass the accumulator reference before it moves

LN2 = 0.6931471805599453
LOG2E = 1.4426950408889634
