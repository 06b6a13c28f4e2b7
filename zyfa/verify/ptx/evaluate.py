"""A CPU evaluator for the straight-line PTX that zyfa.asm.ptx.lean_p emits: the P codes of
the generated text checked against zyfa.spec.rules.p_bits without a GPU.

It reads PTX *text* (what ptxas would get) and runs, elementwise over numpy arrays, the
instructions the P code is made of:

  max.f32, add/sub.rn.f32, fma.rn.f32       (float32, immediates in PTX's 0fXXXXXXXX form)
  cvt.rn.f16x2.f32, max/add/sub/fma.rn.f16x2 (two halves a 32-bit register)
  mov.b32, prmt.b32                          (bit moves, byte permutes)
  ex2.approx.ftz.f32                         (see below)
  cvt.rn.satfinite.e4m3x2.f32                (two floats to two E4M3 bytes, nearest even)
  32-bit integer arithmetic and compares      (the window's bounds and mask: _integer_op),
  ldmatrix / stmatrix .m8n8.x4(.trans).shared.b16 for one warp, on a given shared-memory array,
  ld.param.u32 (a parameter given as a register named after it), and predicated instructions
  (``@p`` / ``@!p``: the destination keeps its value where the guard is false)

Registers hold 32-bit (or 16-bit) bit patterns as numpy uint32 arrays; every instruction
reinterprets them as its type says. Rounding is exact: an add or an fma forms its exact
result as an unevaluated float64 pair (the product of two float32 or half values is exact
in float64, 48 and 22 significant bits; TwoSum makes the sum's error term exact) and rounds
that once to the target precision, correcting the one case where rounding the float64 sum
again could differ (the float64 sum exactly on a midpoint of the target format with a
non-zero error term). Subnormal float32 results do not occur in the P code (|values| >= 2^-2
or 0) and are not modelled beyond numpy's own rounding.

``ex2.approx`` is not correctly rounded on hardware (MUFU.EX2, ~2 ulp); the evaluator uses
exp2 correctly rounded to float32 instead, so for the exact rule it checks the packing and
the E4M3 rounding of ``emit_p_exact_pair`` on exact exp2 inputs, not MUFU's accuracy.
"""
from __future__ import annotations

import re

import numpy as np

_IMM_F32 = re.compile(r"^0[fF]([0-9a-fA-F]{8})$")


def _f32_bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.float32).view(np.uint32)


def _as_f32(b: np.ndarray) -> np.ndarray:
    return np.asarray(b, np.uint32).view(np.float32)


def _round_exact(hi: np.ndarray, lo: np.ndarray, dtype) -> np.ndarray:
    """Round the exact value hi + lo (float64 pair, |lo| <= ulp(hi) / 2) once to ``dtype``."""
    r = hi.astype(dtype)
    toward = np.where(hi > r.astype(np.float64), np.inf, -np.inf).astype(dtype)
    n = np.nextafter(r, toward)
    with np.errstate(invalid="ignore", over="ignore"):
        midpoint = (r.astype(np.float64) + n.astype(np.float64)) / 2 == hi
    # hi on a midpoint: the float64 rounding picked the even neighbour; the exact value lies
    # on the side of lo's sign
    fix = midpoint & (lo != 0) & (np.sign(lo) == np.sign(n.astype(np.float64) - hi))
    return np.where(fix, n, r)


def _two_sum(a: np.ndarray, b: np.ndarray):
    s = a + b
    bb = s - a
    err = (a - (s - bb)) + (b - bb)
    return s, err


def _add(a, b, dtype):
    s, e = _two_sum(a.astype(np.float64), b.astype(np.float64))
    return _round_exact(s, e, dtype)


def _fma(a, b, c, dtype):
    p = a.astype(np.float64) * b.astype(np.float64)        # exact: 2 x 24 (or 2 x 11) bits
    s, e = _two_sum(p, c.astype(np.float64))
    return _round_exact(s, e, dtype)


def _halves(b: np.ndarray):
    b = np.asarray(b, np.uint32)
    lo = (b & 0xFFFF).astype(np.uint16).view(np.float16)
    hi = (b >> 16).astype(np.uint16).view(np.float16)
    return lo, hi


def _pack_halves(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return (lo.astype(np.float16).view(np.uint16).astype(np.uint32)
            | (hi.astype(np.float16).view(np.uint16).astype(np.uint32) << 16))


def _e4m3_rn_satfinite(x: np.ndarray) -> np.ndarray:
    """E4M3 (fn) bits of float32 x: round to nearest even, saturate to +-448, NaN to 0x7F."""
    x = np.asarray(x, np.float32).astype(np.float64)
    sign = np.where(np.signbit(x), 0x80, 0).astype(np.uint32)
    a = np.abs(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    e = np.clip(e, -6, None)                                   # subnormal spacing 2^-9 below 2^-6
    step = np.ldexp(1.0, (e - 3).astype(np.int64))
    k = np.round(a / step)                                     # numpy rounds half to even
    bits = np.where(e <= -6, k, 8 * (e + 7) + k - 8)           # k may reach 16: the next binade, same formula
    bits = np.where(np.isfinite(x) & (bits > 0x7E), 0x7E, bits)
    bits = np.where(np.isnan(x), 0x7F, bits)
    bits = np.where(np.isinf(x), 0x7E, bits)                   # satfinite
    return (bits.astype(np.uint32) | sign) & 0xFF


def _prmt(a: np.ndarray, b: np.ndarray, sel: int) -> np.ndarray:
    """prmt.b32 d, a, b, sel (default mode): byte i of d is byte (sel's nibble i & 7) of {b, a}
    (bytes 0-3 from a, 4-7 from b); nibble bit 3 replicates that byte's sign bit."""
    a, b = np.asarray(a, np.uint32).astype(np.uint64), np.asarray(b, np.uint32).astype(np.uint64)
    pool = a | (b << np.uint64(32))
    d = np.zeros(np.broadcast(a, b).shape, np.uint64)
    for i in range(4):
        nib = (sel >> (4 * i)) & 0xF
        byte = (pool >> np.uint64(8 * (nib & 7))) & np.uint64(0xFF)
        if nib & 8:
            byte = np.where(byte & np.uint64(0x80), np.uint64(0xFF), np.uint64(0))
        d |= byte << np.uint64(8 * i)
    return d.astype(np.uint32)


def _int_imm(tok: str) -> int:
    return int(tok, 16) if tok.lower().startswith("0x") else int(tok)


class Evaluator:
    """Runs straight-line PTX instructions on register arrays; ``regs`` maps names to uint32
    bit arrays (16-bit registers keep their value in the low half, predicates 0 / 1). For
    shuffles the last axis is the lane (a multiple of 32 long)."""

    def __init__(self, regs: dict, shared: np.ndarray | None = None):
        self.regs = {k: np.asarray(v, np.uint32) for k, v in regs.items()}
        self.shared = shared          # one warp's view of shared memory (uint8), for ldmatrix / stmatrix

    def _bits(self, tok: str) -> np.ndarray:
        m = _IMM_F32.match(tok)
        if m:
            return np.uint32(int(m.group(1), 16))
        if tok in self.regs:
            return self.regs[tok]
        if re.match(r"^-?(0[xX][0-9a-fA-F]+|\d+)$", tok):
            return np.uint32(_int_imm(tok) & 0xFFFFFFFF)
        raise KeyError(f"register {tok} read before it is written")

    def step(self, line: str) -> None:
        line = line.strip().rstrip(";").strip()
        if not line or line.endswith(":") or line.startswith("//"):
            return
        guard = None
        if line.startswith("@"):
            guard, line = line.split(None, 1)
            if line.startswith("bra"):
                raise ValueError(f"a branch in straight-line code: {guard} {line!r}")
        op, rest = line.split(None, 1)
        if op.startswith(("ldmatrix.", "stmatrix.")):
            if guard is not None:
                raise NotImplementedError(f"a predicated {op}")
            self._matrix(op, rest)
            return
        toks = [t.strip() for t in rest.split(",")]
        dst, src = toks[0], toks[1:]
        old = self.regs.get(dst, np.uint32(0))
        if op == "ld.param.u32":                               # a parameter: the register named after it
            self.regs[dst] = self.regs[src[0].strip("[]")].copy()
        else:
            self._compute(op, dst, src, line)
        if guard is not None:
            p = self.regs[guard.lstrip("@!")] != 0
            keep = p if guard.startswith("@!") else ~p
            self.regs[dst] = np.where(keep, old, self.regs[dst]).astype(np.uint32)

    def _compute(self, op: str, dst: str, src: list, line: str) -> None:
        x = [self._bits(t) for t in src]
        f = [_as_f32(v) for v in x]
        r = _integer_op(op, x)
        if r is not None:
            pass
        elif op in ("mov.b32", "mov.u32", "mov.f32"):
            r = x[0]
        elif op == "max.f32":
            r = _f32_bits(np.fmax(f[0], f[1]))
        elif op == "max.NaN.f32":                              # a NaN operand gives NaN
            r = _f32_bits(np.maximum(f[0], f[1]))
        elif op == "mul.rn.f32":                               # the float64 product is exact: one rounding
            r = _f32_bits((f[0].astype(np.float64) * f[1].astype(np.float64)).astype(np.float32))
        elif op == "neg.f32":
            r = _f32_bits(-f[0])
        elif op in ("add.rn.f32", "add.f32"):
            r = _f32_bits(_add(f[0], f[1], np.float32))
        elif op in ("sub.rn.f32", "sub.f32"):
            r = _f32_bits(_add(f[0], -f[1], np.float32))
        elif op in ("fma.rn.f32",):
            r = _f32_bits(_fma(f[0], f[1], f[2], np.float32))
        elif op == "cvt.rn.f16x2.f32":                         # d = {hi: a, lo: b}
            r = _pack_halves(f[1].astype(np.float16), f[0].astype(np.float16))
        elif op.endswith(".f16x2"):
            h = [_halves(v) for v in x]
            out = []
            for lane in (0, 1):
                v = [hh[lane] for hh in h]
                if op == "max.f16x2":
                    out.append(np.fmax(v[0], v[1]))
                elif op == "add.rn.f16x2":
                    out.append(_add(v[0], v[1], np.float16))
                elif op == "sub.rn.f16x2":
                    out.append(_add(v[0], -v[1], np.float16))
                elif op == "fma.rn.f16x2":
                    out.append(_fma(v[0], v[1], v[2], np.float16))
                else:
                    raise NotImplementedError(op)
            r = _pack_halves(out[0], out[1])
        elif op == "selp.b32":                                 # predicates hold 0 / 1
            r = np.where(x[2] != 0, x[0], x[1])
        elif op == "shfl.sync.bfly.b32":                       # the array's last axis: lanes of warps
            lanes = np.arange(x[0].shape[-1]) ^ _int_imm(src[1])
            r = x[0][..., lanes]
        elif op == "prmt.b32":
            r = _prmt(x[0], x[1], _int_imm(src[2]))
        elif op == "ex2.approx.ftz.f32":                       # exact exp2, rounded once (not MUFU)
            r = _f32_bits(np.exp2(f[0].astype(np.float64)).astype(np.float32))
        elif op == "cvt.rn.satfinite.e4m3x2.f32":              # d = {hi byte: a, lo byte: b}
            r = (_e4m3_rn_satfinite(f[0]) << 8) | _e4m3_rn_satfinite(f[1])
        else:
            raise NotImplementedError(f"the evaluator does not know {op!r} ({line!r})")
        self.regs[dst] = np.broadcast_to(np.asarray(r, np.uint32), np.broadcast(*x).shape).copy()

    def _matrix(self, op: str, rest: str) -> None:
        """ldmatrix / stmatrix .m8n8 .x4 .b16 for one warp (registers of 32 lanes): lanes 8i..8i+7
        give the row addresses of 8 x 8 tile i of 16-bit elements (16 bytes a row); lane t holds
        elements (t / 4, 2 (t % 4) + {0, 1}) of each tile, or with .trans (2 (t % 4) + {0, 1}, t / 4)."""
        if ".m8n8.x4." not in op or not op.endswith(".shared.b16"):
            raise NotImplementedError(op)
        vec = [t.strip() for t in re.search(r"\{([^}]*)\}", rest).group(1).split(",")]
        addr = self._bits(re.search(r"\[([^\]]*)\]", rest).group(1).strip()).astype(np.int64)
        if addr.shape != (32,):
            raise NotImplementedError(f"{op}: one warp's 32 lanes only")
        lane = np.arange(32)
        trans = ".trans" in op
        mem = self.shared
        for i, name in enumerate(vec):
            rows = addr[8 * i:8 * i + 8]
            at = [rows[2 * (lane % 4) + h] + 2 * (lane // 4) if trans else rows[lane // 4] + 2 * (2 * (lane % 4) + h)
                  for h in (0, 1)]                  # the two 16-bit elements of a lane's register
            if op.startswith("ldmatrix"):
                self.regs[name] = sum((mem[a].astype(np.uint32) | mem[a + 1].astype(np.uint32) << 8) << 16 * h
                                      for h, a in enumerate(at)).astype(np.uint32)
            else:
                word = self._bits(name)
                for h, a in enumerate(at):
                    mem[a] = (word >> 16 * h) & 0xFF
                    mem[a + 1] = (word >> (16 * h + 8)) & 0xFF

    def run(self, lines) -> "Evaluator":
        for line in lines:
            self.step(line)
        return self


_COMPARE = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
            "ne": np.not_equal}


def _integer_op(op: str, x: list) -> np.ndarray | None:
    """32-bit integer ops on uint32 bit arrays (.s32: two's complement), or None for another op.
    setp with .and / .or combines with its fourth operand; predicates are 0 / 1."""
    parts = op.split(".")
    kind = parts[-1]
    if kind not in ("u32", "s32", "b32") or parts[0] not in ("add", "sub", "mul", "mad", "min", "max", "shr", "shl",
                                                              "and", "xor", "setp", "div", "rem"):
        return None
    signed = kind == "s32"
    v = [np.asarray(a, np.uint32).astype(np.int64) for a in x]
    if signed:
        v = [np.where(a >= 2 ** 31, a - 2 ** 32, a) for a in v]
    name = parts[0]
    if name == "setp":
        r = _COMPARE[parts[1]](v[0], v[1])
        if len(parts) == 4:                                    # setp.cmp.and / .or.type d, a, b, c
            c = v[2] != 0
            r = r & c if parts[2] == "and" else r | c
        return r.astype(np.uint32)
    if name in ("div", "rem") and signed:
        raise NotImplementedError(f"{op}: signed division")
    if name == "shr" and signed:
        r = v[0] >> v[1]
    else:
        r = {"add": lambda: v[0] + v[1], "sub": lambda: v[0] - v[1], "mul": lambda: v[0] * v[1],
             "mad": lambda: v[0] * v[1] + v[2], "min": lambda: np.minimum(v[0], v[1]),
             "max": lambda: np.maximum(v[0], v[1]), "shr": lambda: v[0] >> v[1], "shl": lambda: v[0] << v[1],
             "and": lambda: v[0] & v[1], "xor": lambda: v[0] ^ v[1],
             "div": lambda: v[0] // v[1], "rem": lambda: v[0] % v[1]}[name]()
    return (r % 2 ** 32).astype(np.uint32)


def kernel_body(ptx: str, start: str, stop: str) -> list[str]:
    """The instruction lines of ``ptx`` strictly between the first line starting with
    ``start`` and the next starting with ``stop`` (after stripping)."""
    lines = [ln.strip() for ln in ptx.splitlines()]
    i = next(n for n, ln in enumerate(lines) if ln.startswith(start))
    j = next(n for n in range(i + 1, len(lines)) if lines[n].startswith(stop))
    return lines[i + 1:j]


def p_codes_from_ptx(ptx: str, y: np.ndarray) -> np.ndarray:
    """Run the P code of a ``p_codes_kernel`` PTX text (between its vector load of four y and
    its store of the packed word) on float32 ``y`` (length a multiple of 4); returns the uint8
    codes the kernel would store."""
    y = np.asarray(y, np.float32).reshape(-1, 4)
    lines = [ln.strip() for ln in ptx.splitlines()]
    load = next(ln for ln in lines if ln.startswith("ld.global") and ".v4.f32" in ln)
    ys = re.search(r"\{([^}]*)\}", load).group(1).split(",")
    body = kernel_body(ptx, load, "st.global.b32")
    body = [ln for ln in body if not re.match(r"^(mul\.wide|add\.u64)", ln)]     # addressing
    ev = Evaluator({name.strip(): _f32_bits(y[:, i]) for i, name in enumerate(ys)})
    ev.run(body)
    store = next(ln for ln in lines if ln.startswith("st.global.b32"))
    word = ev.regs[store.rstrip(";").split(",")[1].strip()]
    return np.stack([(word >> (8 * i)) & 0xFF for i in range(4)], 1).astype(np.uint8).reshape(-1)


def exact_pair_codes(y8: np.ndarray) -> np.ndarray:
    """E4M3 codes of 2^y8 by ``emit_p_exact_pair``'s text, run with exact exp2 (see the module
    docstring): pairs (y8[2i], y8[2i+1]) go in as (lo, hi); returns the codes in y8's order."""
    from ...asm.ptx.lean_p import emit_p_exact_pair
    from ...asm.ptx.target import program
    y8 = np.asarray(y8, np.float32).reshape(-1, 2)
    prog = program()
    lo, hi = prog.reg("f32"), prog.reg("f32")
    pair = emit_p_exact_pair(prog, lo, hi)
    ev = Evaluator({str(lo): _f32_bits(y8[:, 0]), str(hi): _f32_bits(y8[:, 1])})
    ev.run(render_body(prog))
    w = ev.regs[str(pair)]
    return np.stack([w & 0xFF, (w >> 8) & 0xFF], 1).astype(np.uint8).reshape(-1)


def render_body(prog) -> list[str]:
    """A Program's instructions as the PTX text the module would hold."""
    return [ln.strip() for ln in prog.body]
