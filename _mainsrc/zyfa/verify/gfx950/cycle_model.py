"""A static cycle model of an attention main loop on one gfx950 SIMD: issue cycles per pipe
(matrix, vector, LDS, scalar, memory) counted from the assembly, per 32-query x 128-key step.

    python -m zyfa.verify.gfx950.cycle_model         (prints ZYFA's figures and zyfa's beside them)

Costs (cycles per wave64 instruction), with where each comes from:
  MFMA 32x32x64 FP8     64   MI355X's ~5 PFLOP/s dense FP8: 65,536 MACs per instruction at
                             1,024 MACs per clock per SIMD; reproduces ZYFA's 1,024 matrix
                             cycles per step (16 MFMAs)
  VALU, 32-bit           4   16 lanes x 4 clocks per wave64 (the FP32 vector peak)
  VALU, packed f32       4   for 2 elements a lane (v_pk_*)
  v_exp/v_log/v_rcp      8   an assumption, calibrated: with it, ZYFA's described exact-softmax
                             mix gives their published 896 cycles (CDNA3's quarter rate, 16,
                             would give 1,408)
  v_cvt_pk_fp8_f32       4   for 2 elements
  LDS (ds_*)             4   issue only; SALU 1; global memory issue 4; s_nop N: N + 1 idle

The busy fraction of the matrix pipe: one wave at a time (nothing overlaps, matrix /
everything); ideal ping-pong (two waves per SIMD, one's matrix work hiding the other's:
matrix / max(matrix, the rest)); and phased ping-pong, which follows the generated kernel's
barrier phases (``busy_phased``). ZYFA's measured 86% includes waits no static count sees;
the model does not pretend to reproduce those.
"""
from __future__ import annotations

import dataclasses

MFMA_CYCLES = 64
VALU_CYCLES = 4
TRANS_CYCLES = 8            # calibrated, see the module docstring
STEP_QUERIES, STEP_KEYS = 32, 128
ZYFA_BUSY_WITH_PINGPONG = 0.86   # reported by ZYFA for its MI355X kernel, not modelled


@dataclasses.dataclass
class Pipes:
    matrix: float = 0.0
    vector: float = 0.0
    lds: float = 0.0
    scalar: float = 0.0
    memory: float = 0.0

    def scaled(self, k: float) -> "Pipes":
        return Pipes(*(k * getattr(self, f.name) for f in dataclasses.fields(self)))

    @property
    def other(self) -> float:
        return self.vector + self.lds + self.scalar + self.memory

    def busy_serial(self) -> float:
        return self.matrix / (self.matrix + self.other)

    def busy_pingpong(self) -> float:
        return self.matrix / max(self.matrix, self.other)


def instruction_cycles(op: str) -> tuple[str, float]:
    """(pipe, cycles) of one wave64 instruction."""
    if op.startswith("v_mfma"):
        if "32x32x64" not in op:
            raise ValueError(f"no cost for {op}")
        return "matrix", MFMA_CYCLES
    if op.startswith(("v_exp", "v_log", "v_rcp", "v_sqrt", "v_rsq")):
        return "vector", TRANS_CYCLES
    if op.startswith("v_"):
        return "vector", VALU_CYCLES
    if op.startswith("ds_"):
        return "lds", 4
    if op.startswith(("global_", "buffer_")):
        return "memory", 4
    if op == "s_nop":
        return "scalar", 0          # counted with its operand below
    if op.startswith("s_"):
        return "scalar", 1
    raise ValueError(f"no pipe for {op}")


def loop_phases(text: str, label: str = ".Lblock", taken: tuple = ()) -> list[Pipes]:
    """Issue cycles per pipe of one steady-state pass of the loop that starts at ``label`` and
    ends at the branch back to it, split into phases at each s_barrier. Conditional forward
    branches to a label in ``taken`` are taken (the steady state skips the masking only the
    diagonal band needs and the rescale a moved reference needs); other conditional branches
    fall through (first-block and last-block cases, and group 1's side of a group test);
    s_branch is followed."""
    lines = [ln.split(";")[0].split("//")[0].strip() for ln in text.splitlines()]
    start = lines.index(f"{label}:")
    phases, skip_to = [Pipes()], None
    for ln in lines[start + 1:]:
        if skip_to is not None:
            skip_to = None if ln == f"{skip_to}:" else skip_to
            continue
        if not ln or ln.endswith(":") or ln.startswith("."):
            continue
        op, pipes = ln.split()[0], phases[-1]
        if op.startswith("s_cbranch") and ln.endswith(label):
            pipes.scalar += 1
            if len(phases) > 1:                    # the tail after the last barrier runs just before
                tail = phases.pop()                # the next pass's first phase: it belongs to it
                phases[0] = _total([phases[0], tail])
            return phases
        if op == "s_barrier":
            phases.append(Pipes())
            continue
        if op.startswith("s_cbranch") or op == "s_branch":
            pipes.scalar += 1
            if op == "s_branch" or ln.split()[-1] in taken:
                skip_to = ln.split()[-1]
            continue
        pipe, cycles = instruction_cycles(op)
        if op == "s_nop":
            cycles = int(ln.split()[1], 0) + 1
        setattr(pipes, pipe, getattr(pipes, pipe) + cycles)
    raise ValueError(f"no branch back to {label}")


def loop_cycles(text: str, label: str = ".Lblock", taken: tuple = ()) -> Pipes:
    """The whole steady-state pass of ``loop_phases``, summed."""
    total = Pipes()
    for p in loop_phases(text, label, taken):
        for f in dataclasses.fields(Pipes):
            setattr(total, f.name, getattr(total, f.name) + getattr(p, f.name))
    return total


def busy_phased(phases: list[Pipes]) -> float:
    """The matrix pipe's busy fraction when two waves share a SIMD a barrier apart (ping-pong):
    in each interval one runs phase 1 while the other runs phase 2. The interval lasts at least
    either wave's phase (one instruction at a time) and either pipe's total work (the matrix
    pipe and the vector issue are shared)."""
    if len(phases) != 2:
        raise ValueError(f"ping-pong needs a two-phase loop, got {len(phases)} phases")
    (m1, o1), (m2, o2) = ((p.matrix, p.other) for p in phases)
    return (m1 + m2) / max(m1 + o1, m2 + o2, m1 + m2, o1 + o2)


def zyfa_published() -> dict[str, Pipes]:
    """ZYFA's per-step arithmetic from the instruction mixes it describes, per element of the
    32 x 128 step (64 elements a lane): exact = packed max + packed FMA + exp + pack convert;
    lean = packed max + packed FMA + pack convert; the row sum is one more MFMA per block."""
    per_lane = STEP_QUERIES * STEP_KEYS // 64
    packed = VALU_CYCLES / 2
    matrix = 16 * MFMA_CYCLES
    exact = per_lane * (packed + packed + TRANS_CYCLES + packed)
    lean = per_lane * (packed + packed + packed)
    return {"exact": Pipes(matrix=matrix, vector=exact), "lean": Pipes(matrix=matrix, vector=lean)}


def zyfa_generated(rule: str = "lean_cubic", ref_rule: str = "block_pow2") -> list[Pipes]:
    """zyfa's generated gfx950 loop (64-key blocks, d128), per phase, scaled to a 32 x 128 step."""
    from ...asm.gfx950.attention import BLOCK_N, STEADY_STATE_SKIPS, attention_kernel
    text = attention_kernel(rule, True, 128, 128, ref_rule)[1]
    return [p.scaled(STEP_KEYS / BLOCK_N) for p in loop_phases(text, taken=STEADY_STATE_SKIPS)]


def _total(phases: list[Pipes]) -> Pipes:
    return Pipes(*(sum(getattr(p, f.name) for p in phases) for f in dataclasses.fields(Pipes)))


def report() -> str:
    rows = [(f"ZYFA {name} (published mix)", None, p) for name, p in
            (("exact FP8 softmax", zyfa_published()["exact"]), ("lean P", zyfa_published()["lean"]))]
    rows += [(f"zyfa gfx950 {r}, {ref}", phases, _total(phases)) for ref in ("block", "block_pow2")
             for r in ("lean", "lean_quad", "lean_cubic") for phases in [zyfa_generated(r, ref)]]
    out = [f"{'per 32-query x 128-key step, one SIMD':38s} {'matrix':>6s} {'vector':>6s} {'other':>5s} "
           f"{'serial':>6s} {'ideal':>6s} {'phased ping-pong':>17s}"]
    for name, phases, p in rows:
        phased = f"{busy_phased(phases):17.0%}" if phases else f"{'-':>17s}"
        out.append(f"{name:38s} {p.matrix:6.0f} {p.vector:6.0f} {p.lds + p.scalar + p.memory:5.0f} "
                   f"{p.busy_serial():6.0%} {p.busy_pingpong():6.0%} {phased}")
    out.append(f"matrix-pipe busy: serial = one wave alone; ideal = matrix / max(matrix, rest); phased = two "
               f"waves a barrier apart through the loop's two phases. ZYFA measured {ZYFA_BUSY_WITH_PINGPONG:.0%} "
               f"with ping-pong (waits a static count does not see).")
    return "\n".join(out)


if __name__ == "__main__":
    print(report())
