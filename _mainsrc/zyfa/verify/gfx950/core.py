"""The emulator's core: a wave's state (scalar, vector and accumulation registers, exec, vcc,
scc, pc), global memory, the parsed kernel, and ``OPS``, the table of instruction handlers
that the ``ops_*`` modules fill (``@op``). It imports no handler module, so the handlers can
import it and ``emulator`` can import both.

Arithmetic helpers live here too because every handler family uses them: float32 values as
uint32 lanes and back, and ``fma_f32``, an FMA rounded once as the hardware's is.
"""
from __future__ import annotations

import dataclasses
import re

import numpy as np

from .waits import Waits

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


def as_f32(x: np.ndarray) -> np.ndarray:
    """uint32 lanes read as float32."""
    return x.view(F32)


def as_u32(x: np.ndarray) -> np.ndarray:
    """float32 values as their uint32 bits."""
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




REG = re.compile(r"^([svat])(?:(\d+)|\[(\d+):(\d+)\])$")
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
        m = REG.match(tok)
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
        return literal(tok, bits)

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
            val = np.full(WAVE, literal(tok, 32, float_op), U32)
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


def literal(tok: str, bits: int = 32, float_op: bool = False) -> int:
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



def op_sel(i: Instr, key: str, default=(0, 0, 0)) -> list:
    """A VOP3P modifier list (op_sel:[1,0,0], neg_lo:...) as ints, or ``default`` when absent."""
    if key not in i.mods:
        return list(default)
    return [int(x) for x in i.mods[key].strip("[]").split(",")]


# ------------------------------------------------------------------ the handler table
OPS: dict = {}          # opcode -> handler(wave, instruction); filled by the ops_* modules


def op(*names):
    """Register the decorated handler for each opcode in ``names``."""
    def deco(fn):
        for n in names:
            OPS[n] = fn
        return fn
    return deco
