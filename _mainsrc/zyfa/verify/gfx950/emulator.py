"""An instruction-level emulator (numpy) for the subset of gfx950 (CDNA4) that zyfa's kernels
and the small Triton kernels it is validated on use: the entry point (``parse``, ``Memory``,
``launch``). The wave state and the handler table are in ``core``, the instruction semantics
in ``ops_scalar``, ``ops_vector``, ``ops_memory`` and ``ops_matrix`` (importing them here
registers their handlers), the wait check in ``waits``.

It runs AMDGCN assembly text, as Triton writes it or as zyfa's generator emits it: one
workgroup at a time, its waves of 64 lanes stepped in turn (each runs until it ends or
reaches ``s_barrier``), with the AMDHSA launch ABI (user SGPRs: kernarg pointer and
preloaded kernargs; system SGPRs: workgroup ids; v0: work-item ids) taken from the
kernel's ``.amdhsa_*`` directives. Memory is one flat byte array (``Memory``).

Arithmetic is exact where the hardware's is: float32 add/mul round to nearest even with
denormals kept, FMA rounds once (emulated exactly, see ``fma_f32``). Every load completes
at issue, so two checks stand in for what that hides: ``waits.Waits`` raises when code touches
a register a load has not been waited for (``s_waitcnt``), or passes a barrier with an LDS
write outstanding; ``LdsRaces`` raises when two waves touch an LDS byte between the same two
barriers and one of them writes it. Unknown instructions raise, naming themselves: the
emulator never guesses.
"""
from __future__ import annotations

import numpy as np

from . import ops_matrix, ops_memory, ops_scalar, ops_vector  # noqa: F401  (register the handlers into OPS)
from .core import LANES, OPS, U32, WAVE, HostMemory, Kernel, Memory, Wave, fma_f32, parse  # noqa: F401  (re-exported)
from .ops_matrix import E4M3  # noqa: F401  (re-exported: E4M3 byte -> value table)
from .waits import WaitError  # noqa: F401  (re-exported)

__all__ = ["E4M3", "OPS", "HostMemory", "Kernel", "LdsRaceError", "LdsRaces", "Memory", "WaitError", "fma_f32",
           "launch", "parse"]


# ------------------------------------------------------------------ LDS races between barriers
class LdsRaceError(RuntimeError):
    pass


class LdsRaces:
    """Flags LDS bytes that one wave writes and another wave reads or writes between the same
    two barriers: the emulator runs waves one after another, so such code gives an answer
    here and a race on hardware. ``epoch`` counts the workgroup's barriers."""

    def __init__(self, nbytes: int):
        self.epoch = 0
        self.write_epoch = np.full(nbytes, -1, np.int64)
        self.writer = np.zeros(nbytes, np.int64)
        self.read_epoch = np.full(nbytes, -1, np.int64)
        self.readers = np.zeros(nbytes, np.uint64)     # a bit per wave that read in read_epoch

    def _fail(self, what: str, wave: int, idx: np.ndarray, other: list) -> None:
        raise LdsRaceError(f"LDS race after barrier {self.epoch}: wave {wave} {what} byte {int(idx[0])} "
                           f"(of {len(idx)}) that wave(s) {sorted(set(other))[:4]} touched since it")

    def read(self, wave: int, idx: np.ndarray) -> None:
        idx = np.unique(idx)
        bad = (self.write_epoch[idx] == self.epoch) & (self.writer[idx] != wave)
        if bad.any():
            self._fail("reads", wave, idx[bad], self.writer[idx[bad]].tolist())
        bit = np.uint64(1) << np.uint64(wave)
        fresh = self.read_epoch[idx] != self.epoch
        self.readers[idx] = np.where(fresh, bit, self.readers[idx] | bit)
        self.read_epoch[idx] = self.epoch

    def write(self, wave: int, idx: np.ndarray, new: np.ndarray, old: np.ndarray) -> None:
        """A write of bytes ``new`` over ``old``. Another wave's write of the same value in the
        same interval is allowed (Triton stores replicated values from every replica)."""
        order = np.argsort(idx, kind="stable")
        idx, new, old = idx[order], new[order], old[order]
        last = np.r_[idx[1:] != idx[:-1], True]                 # the value a byte ends with
        idx, new, old = idx[last], new[last], old[last]
        bit = np.uint64(1) << np.uint64(wave)
        wrote = (self.write_epoch[idx] == self.epoch) & (self.writer[idx] != wave) & (new != old)
        read = (self.read_epoch[idx] == self.epoch) & ((self.readers[idx] & ~bit) != 0)
        if (wrote | read).any():
            bad = wrote | read
            others = [int(self.writer[i]) if w else (int(r & ~bit) & -int(r & ~bit)).bit_length() - 1
                      for i, w, r in zip(idx[bad], wrote[bad], self.readers[idx[bad]])]
            self._fail("writes", wave, idx[bad], others)
        self.write_epoch[idx] = self.epoch
        self.writer[idx] = wave


# ------------------------------------------------------------------ launch
def launch(kernel: Kernel, mem: Memory, grid: tuple, block: int, kernargs: bytes, lds_bytes: int = 65536) -> None:
    """Run every workgroup of a 1-3 D grid (block: threads per workgroup, 1-D). LDS gets the
    kernel's fixed size or ``lds_bytes`` (Triton allocates its shared memory at launch)."""
    abi = kernel.abi
    if len(kernargs) < kernel.kernarg_size:
        kernargs = kernargs + bytes(kernel.kernarg_size - len(kernargs))
    kernarg_addr = mem.alloc(np.frombuffer(kernargs, np.uint8))
    preload = abi.get("user_sgpr_kernarg_preload_length", 0)
    pre_off = abi.get("user_sgpr_kernarg_preload_offset", 0)
    grid = tuple(grid) + (1,) * (3 - len(grid))
    waves = (block + WAVE - 1) // WAVE
    for gz in range(grid[2]):
        for gy in range(grid[1]):
            for gx in range(grid[0]):
                lds = np.zeros(max(abi.get("group_segment_fixed_size", 0), lds_bytes), np.uint8)
                races = LdsRaces(len(lds))
                group = []
                for wi in range(waves):
                    w = Wave(kernel, mem, lds)
                    w.index, w.races = wi, races
                    sg = 0
                    for flag, n in (("dispatch_ptr", 2), ("queue_ptr", 2)):
                        if abi.get(f"user_sgpr_{flag}", 0):
                            raise NotImplementedError(f"user SGPR {flag}")
                    if abi.get("user_sgpr_kernarg_segment_ptr", 0):
                        w.s[sg], w.s[sg + 1] = kernarg_addr & 0xFFFFFFFF, kernarg_addr >> 32
                        sg += 2
                    words = np.frombuffer(kernargs[4 * pre_off:4 * (pre_off + preload)], U32)
                    w.s[sg:sg + preload] = words
                    sg = abi.get("user_sgpr_count", sg + preload)
                    for axis, g in zip("xyz", (gx, gy, gz)):
                        if abi.get(f"system_sgpr_workgroup_id_{axis}", 1 if axis == "x" else 0):
                            w.s[sg] = g
                            sg += 1
                    tid = wi * WAVE + LANES
                    w.v[0] = tid.astype(U32)
                    live = tid < block
                    w.exec = int(np.bitwise_or.reduce(live.astype(np.uint64) << LANES.astype(np.uint64)))
                    group.append(w.run())
                with np.errstate(all="ignore"):      # inf and NaN are values here, as on the GPU
                    _run_group(group, races)


def _run_group(group, races: LdsRaces) -> None:
    """Step each wave to its next barrier (or its end), until all have ended."""
    running = list(group)
    while running:
        races.epoch += 1
        still = []
        for g in running:
            try:
                next(g)
                still.append(g)
            except StopIteration:
                pass
        if still and len(still) != len(running):
            raise RuntimeError("a wave ended while others wait at a barrier")
        running = still
