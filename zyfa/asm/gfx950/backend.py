"""What the generated gfx950 kernel runs: FP8 on MI355X under ROCm, head dims 64 or 128 (value
dims 32, 64 or 128) or 192/128, per-head (or per-tensor) q/k descales, the float32 lean
rules, block or block_pow2 references. Verified in an emulator; never run on hardware."""
from __future__ import annotations

import functools

from ...device import HAS_HIP_RUNTIME, is_rocm
from ...spec.rules import LEAN_RULES
from ..limits import fp8_refusal


@functools.cache
def _fits(head_dim: int, value_dim: int) -> bool:
    """Whether the generated kernel takes these head dims (it must fit a wave's registers)."""
    from .attention import fits
    return fits(head_dim, value_dim)


def supports(p) -> tuple[bool, str]:
    """(can run, why) for a zyfa.dispatch.Problem."""
    if p.windowed:
        return False, (f"the generated gfx950 kernel has no sliding window (window_size {p.window}); "
                       "the Triton kernel has")
    if p.device.type != "cuda" or not is_rocm():
        return False, "generated gfx950 assembly runs on AMD GPUs under ROCm"
    if p.arch != "gfx950":
        return False, f"generated gfx950 assembly targets gfx950 (MI355X), device is {p.arch}"
    refusal = fp8_refusal(p, "generated gfx950 kernel", _fits(*p.head_dims),
                          "64 or 128 (value dims 32, 64 or 128) or 192/128", LEAN_RULES, ("block", "block_pow2"))
    if refusal:
        return refusal
    if not HAS_HIP_RUNTIME:
        return False, "the HIP runtime (libamdhip64) is not installed"
    return True, ("generated gfx950 assembly, 8 waves in ping-pong, 64-key blocks (verified in an emulator; "
                  "not yet run on MI355X)")


def run(q, k, v, **kw):
    from .kernels import attention_fp8
    return attention_fp8(q, k, v, **kw)
