"""An instruction-level emulator (numpy) for the subset of gfx950 (CDNA4) that zyfa's kernels
and the small Triton kernels it is validated on use.

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

import dataclasses
import re

import numpy as np

WAVE = 64
LANES = np.arange(WAVE)
F32, F64, U32, I32, U64 = np.float32, np.float64, np.uint32, np.int32, np.uint64
MASK64 = (1 << 64) - 1


# ------------------------------------------------------------------ arithmetic
def fma_f32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """float32 a*b + c rounded once. The product is exact in float64; the sum's rounding
    error is recovered by TwoSum and used to settle the one case where rounding the float64
    sum again to float32 could go wrong: a sum that lands exactly on a float32 midpoint."""
    a64, b64, c64 = (np.asarray(x, F32).astype(F64) for x in (a, b, c))
    p = a64 * b64
    with np.errstate(all="ignore"):
        s = p + c64
        bb = s - p
        err = (p - (s - bb)) + (c64 - bb)
        r = s.astype(F32)
        d = s - r.astype(F64)
        # the float32 neighbour on s's side of r, and whether s sits halfway to it
        gap = np.where(d > 0, np.nextafter(r, F32(np.inf)).astype(F64) - r.astype(F64),
                       r.astype(F64) - np.nextafter(r, F32(-np.inf)).astype(F64))
        tie = np.isfinite(s) & (err != 0) & (d != 0) & (np.abs(d) * 2 == gap)
    up = tie & (d > 0) & (err > 0)            # the exact sum lies past the midpoint
    down = tie & (d < 0) & (err < 0)
    r = np.where(up, np.nextafter(r, F32(np.inf)), r)
    r = np.where(down, np.nextafter(r, F32(-np.inf)), r)
    return r.astype(F32)


def lanes_of(mask: int) -> np.ndarray:
    """A 64-bit lane mask as 64 booleans."""
    return ((np.uint64(mask) >> LANES.astype(np.uint64)) & np.uint64(1)).astype(bool)


def _f(x: np.ndarray) -> np.ndarray:
    return x.view(F32)


def _u(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, F32).view(U32)


# ------------------------------------------------------------------ memory
class Memory:
    """Flat global memory: allocations copied in, read back by address."""

    BASE = 1 << 20

    def __init__(self):
        self.data = np.zeros(0, np.uint8)

    def alloc(self, array: np.ndarray) -> int:
        raw = np.ascontiguousarray(array).view(np.uint8).reshape(-1)
        start = (len(self.data) + 255) // 256 * 256
        self.data = np.concatenate([self.data, np.zeros(start - len(self.data) + len(raw) + 256, np.uint8)])
        self.data[start:start + len(raw)] = raw
        return self.BASE + start

    def _index(self, addr: np.ndarray, nbytes: int) -> np.ndarray:
        off = np.asarray(addr, np.int64) - self.BASE
        if off.size and (off.min() < 0 or off.max() + nbytes > len(self.data)):
            raise IndexError(f"global access out of bounds: {hex(int(off.min() + self.BASE))}..")
        return off[:, None] + np.arange(nbytes)

    def read(self, addr: np.ndarray, nbytes: int) -> np.ndarray:
        return self.data[self._index(addr, nbytes)]

    def write(self, addr: np.ndarray, data: np.ndarray) -> None:
        self.data[self._index(addr, data.shape[1])] = data

    def array(self, addr: int, dtype, count: int) -> np.ndarray:
        n = np.dtype(dtype).itemsize * count
        start = addr - self.BASE
        return self.data[start:start + n].copy().view(dtype)


class HostMemory(Memory):
    """The process's own memory as the device's: addresses are real pointers (of numpy arrays
    or CPU tensors), so a kernel can run on the caller's buffers (a fake HIP runtime uses it)."""

    def __init__(self):
        self._keep = []

    def alloc(self, array: np.ndarray) -> int:
        buf = np.ascontiguousarray(array).copy()
        self._keep.append(buf)
        return buf.ctypes.data

    def read(self, addr: np.ndarray, nbytes: int) -> np.ndarray:
        import ctypes
        return np.stack([np.frombuffer(ctypes.string_at(int(a), nbytes), np.uint8) for a in addr]) if len(addr) \
            else np.zeros((0, nbytes), np.uint8)

    def write(self, addr: np.ndarray, data: np.ndarray) -> None:
        import ctypes
        for a, row in zip(addr, np.ascontiguousarray(data)):
            ctypes.memmove(int(a), row.ctypes.data, row.size)

    def array(self, addr: int, dtype, count: int) -> np.ndarray:
        import ctypes
        return np.frombuffer(ctypes.string_at(addr, np.dtype(dtype).itemsize * count), dtype).copy()


# ------------------------------------------------------------------ parsing
@dataclasses.dataclass
class Instr:
    op: str
    args: list
    mods: dict
    line: str


_REG = re.compile(r"^([svat])(?:(\d+)|\[(\d+):(\d+)\])$")
_DIRECTIVE = re.compile(r"^\s*\.amdhsa_(\w+)\s+(\S+)")


@dataclasses.dataclass
class Kernel:
    name: str
    code: list
    labels: dict
    abi: dict               # the .amdhsa_* directives, as ints
    kernarg_size: int


def parse(text: str, name: str | None = None) -> Kernel:
    """The kernel ``name`` (default: the first) of an AMDGCN assembly text."""
    lines = [ln.split(";")[0].split("//")[0].rstrip() for ln in text.splitlines()]   # both comment styles
    names = [m.group(1) for ln in lines if (m := re.match(r"^(\w+):", ln))]
    name = name or next(n for n in names if not n.startswith("."))
    abi, in_kd, code, labels, in_fn = {}, False, [], {}, False
    for ln in lines:
        s = ln.strip()
        if s.startswith(".amdhsa_kernel"):
            in_kd = s.split()[1] == name
            continue
        if s.startswith(".end_amdhsa_kernel"):
            in_kd = False
            continue
        if in_kd and (m := _DIRECTIVE.match(ln)):
            abi[m.group(1)] = int(m.group(2), 0)
            continue
        if s == f"{name}:":
            in_fn = True
            continue
        if not in_fn or not s:
            continue
        if s.startswith(".Lfunc_end") or s.startswith(".section") or s.startswith(".end_amdgpu"):
            in_fn = False
            continue
        if s.endswith(":"):
            labels[s[:-1]] = len(code)
            continue
        if s.startswith("."):
            continue
        op, _, rest = s.partition(" ")
        args, mods = [], {}
        for tok in _split_operands(rest):
            if re.match(r"^[a-z_][a-z0-9_]*:", tok):      # modifiers: offset:64, dst_sel:WORD_1, bitop3:0xde
                k, _, v = tok.partition(":")
                mods[k] = v
            elif tok in ("glc", "slc", "nt", "sc0", "sc1", "lds", "clamp", "offen", "idxen"):
                mods[tok] = True
            else:
                args.append(tok)
        code.append(Instr(re.sub(r"_e(32|64)$", "", op), args, mods, s))
    if not code:
        raise ValueError(f"no instructions found for kernel {name!r}")
    kernarg = abi.get("kernarg_size", 0)
    return Kernel(name, code, labels, abi, kernarg)


def _split_operands(rest: str) -> list:
    out, depth, cur = [], 0, ""
    for ch in rest:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if (ch == "," or ch == " ") and depth == 0:
            if cur.strip():
                out.append(cur.strip())
            cur = ""
            continue
        cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


# ------------------------------------------------------------------ one wave
class Wave:
    def __init__(self, kernel: Kernel, mem: Memory, lds: np.ndarray):
        self.k, self.mem, self.lds = kernel, mem, lds
        self.s = np.zeros(112, U32)
        self.v = np.zeros((512, WAVE), U32)
        self.a = np.zeros((256, WAVE), U32)          # accumulation VGPRs (MFMA results)
        self.exec = 0
        self.vcc = 0
        self.scc = 0
        self.pc = 0
        self.index, self.races = 0, None             # set by launch: the wave's number, the race check
        self.waits = Waits()                          # loads not yet waited for (s_waitcnt)

    # ---- operands
    def _regs(self, tok):
        m = _REG.match(tok)
        if not m:
            return None
        kind = m.group(1)
        lo = int(m.group(2) if m.group(2) is not None else m.group(3))
        hi = lo if m.group(2) is not None else int(m.group(4))
        return kind, lo, hi

    def sval(self, tok: str, bits: int = 32) -> int:
        """A scalar operand's value (an int of ``bits`` bits)."""
        if tok == "vcc":
            return self.vcc
        if tok == "exec":
            return self.exec
        if tok == "scc":
            return self.scc
        r = self._regs(tok)
        if r and r[0] == "s":
            _, lo, hi = r
            words = [int(self.s[i]) for i in range(lo, hi + 1)]
            return sum(w << (32 * i) for i, w in enumerate(words))
        return _literal(tok, bits)

    def set_s(self, tok: str, value: int) -> None:
        if tok == "vcc":
            self.vcc = value & MASK64
            return
        if tok == "exec":
            self.exec = value & MASK64
            return
        _, lo, hi = self._regs(tok)
        for i in range(lo, hi + 1):
            self.s[i] = (value >> (32 * (i - lo))) & 0xFFFFFFFF

    def vsrc(self, tok: str, float_op: bool = False) -> np.ndarray:
        """A 32-bit vector operand as uint32 lanes (scalars and literals broadcast)."""
        neg = tok.startswith("-") and self._regs(tok[1:]) is not None
        if neg:
            tok = tok[1:]
        r = self._regs(tok)
        if r and r[0] in "va":
            val = self.file(r[0])[r[1]].copy()
        elif r and r[0] == "s" or tok in ("vcc", "exec"):
            val = np.full(WAVE, self.sval(tok) & 0xFFFFFFFF, U32)
        else:
            val = np.full(WAVE, _literal(tok, 32, float_op), U32)
        if neg:
            val = val ^ U32(0x80000000) if float_op else (-val.astype(np.int64)).astype(U32)
        return val

    def vsrc64(self, tok: str) -> np.ndarray:
        r = self._regs(tok)
        if r and r[0] == "v":
            return self.v[r[1]].astype(U64) | (self.v[r[1] + 1].astype(U64) << U64(32))
        return np.full(WAVE, self.sval(tok, 64), U64)

    def active(self) -> np.ndarray:
        return lanes_of(self.exec)

    def file(self, kind: str) -> np.ndarray:
        return self.v if kind == "v" else self.a

    def set_v(self, tok: str, value: np.ndarray) -> None:
        kind, lo, hi = self._regs(tok)
        regs = self.file(kind)
        act = self.active()
        value = np.asarray(value)
        if hi > lo:
            value = value.astype(U64)
            for i in range(lo, hi + 1):
                word = ((value >> U64(32 * (i - lo))) & U64(0xFFFFFFFF)).astype(U32)
                regs[i] = np.where(act, word, regs[i])
        else:
            regs[lo] = np.where(act, value.astype(U32), regs[lo])

    def block(self, tok: str) -> np.ndarray:
        """A register tuple as (lanes, registers) uint32."""
        kind, lo, hi = self._regs(tok)
        return self.file(kind)[lo:hi + 1].T.copy()

    def set_block(self, tok: str, words: np.ndarray, masked: bool = True) -> None:
        kind, lo, hi = self._regs(tok)
        regs, act = self.file(kind), self.active() if masked else np.ones(WAVE, bool)
        for j in range(hi - lo + 1):
            regs[lo + j] = np.where(act, words[:, j], regs[lo + j])

    def mask_from(self, cond: np.ndarray) -> int:
        bits = (cond & self.active()).astype(np.uint64) << LANES.astype(np.uint64)
        return int(np.bitwise_or.reduce(bits))

    # ---- execution
    def run(self):
        """A generator: yields at each s_barrier, returns at s_endpgm."""
        code = self.k.code
        while True:
            if self.pc >= len(code):
                raise RuntimeError(f"{self.k.name}: ran past the end of the code")
            ins = code[self.pc]
            self.pc += 1
            if ins.op == "s_endpgm":
                return
            self.waits.before(ins)
            if ins.op == "s_barrier":
                yield
                continue
            handler = OPS.get(ins.op)
            if handler is None:
                raise NotImplementedError(f"emulator: instruction {ins.op!r} ({ins.line}) is not implemented")
            handler(self, ins)
            self.waits.after(ins)

    def jump(self, label: str) -> None:
        self.pc = self.k.labels[label]


def _literal(tok: str, bits: int = 32, float_op: bool = False) -> int:
    try:
        value = int(tok, 0)
    except ValueError:
        value = None
    if value is not None:
        return value & ((1 << bits) - 1)
    x = float(tok)                                   # inline float constants: 0.5, -4.0, ...
    if bits == 64:
        return int(np.array(x, F64).view(U64))
    return int(np.array(x, F32).view(U32))


# ------------------------------------------------------------------ instruction semantics
from .waits import Waits, WaitError  # noqa: E402,F401  (re-exported)

OPS: dict = {}          # opcode -> handler(wave, instruction); filled by .semantics


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


from . import semantics as _semantics  # noqa: E402  (registers the handlers into OPS)
from .semantics import E4M3  # noqa: E402,F401  (re-exported: E4M3 byte -> value table)
