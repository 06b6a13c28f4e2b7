"""Integer sizes that launches compute on the host every call (grids, tile widths).

Triton 3.6 makes ``triton.cdiv`` and ``triton.next_power_of_2`` constexpr functions; called
from Python, their wrapper costs about 2 us a call, and an INT8 quantizer call computed a dozen.
These are the same functions without the wrapper: the same integers."""
import triton

cdiv = triton.cdiv.fn
next_power_of_2 = triton.next_power_of_2.fn
