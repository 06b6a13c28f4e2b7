"""Throughput microbenchmarks of the instructions a softmax can be built from, as generated
PTX: each thread runs ``iters`` rounds of ``chains`` independent dependency chains of one
instruction (enough chains to hide its latency), and stores a value that depends on every
result so nothing is optimised away. Timed on a GPU by the lab's microbenchmark script (outside the package).

Every kernel also advances each chain's input with one FADD per round (so loop-invariant
code cannot be hoisted); the ``fadd`` kernel alone is that baseline.
"""
from __future__ import annotations

from ...asm.ptx.target import f32, module, program

# op -> one instruction per chain and round: {x} the advancing f32 input, {y} an f32 chain,
# {b} a b32 chain, {h} a 16-bit result
OPS = {
    "fadd": "",
    "ffma": "fma.rn.f32 {y}, {y}, 0f3F7FF000, {x};",
    "fmnmx": "max.f32 {y}, {y}, {x};",
    "prmt": "prmt.b32 {y}, {x}, {y}, 0x0040;",
    "mufu_ex2": "ex2.approx.ftz.f32 {y}, {y};",
    "cvt_e4m3x2": "cvt.rn.satfinite.e4m3x2.f32 {h}, {x}, {y};",
    "hfma2": "fma.rn.f16x2 {b}, {b}, {b}, {b};",
}


def microbench_kernel(op: str, chains: int = 16, arch: str = "sm_90a") -> tuple[str, str]:
    """(name, PTX) of zyfa_mb_<op>(out_ptr, iters): out[tid] = a digest of all chains."""
    if op not in OPS:
        raise ValueError(f"op must be one of {tuple(OPS)}, got {op!r}")
    name = f"zyfa_mb_{op}"
    prog = program()
    out, off = prog.regs("u64", 2)
    iters, i, tid, cta, ntid, gid = prog.regs("u32", 6)
    more = prog.reg("pred")
    emit = prog.emit
    emit("ld.param.u64", out, "out_ptr")
    emit("ld.param.u32", iters, "iters")
    emit("mov.u32", tid, "%tid.x")
    emit("mov.u32", cta, "%ctaid.x")
    emit("mov.u32", ntid, "%ntid.x")
    emit("mad.lo.u32", gid, cta, ntid, tid)
    xs, ys = prog.regs("f32", chains), prog.regs("f32", chains)
    hs = prog.regs("b32", chains)
    for c in range(chains):
        emit("mov.f32", xs[c], f32(0.001 * (c + 1)))
        emit("mov.f32", ys[c], f32(0.5))
        emit("mov.b32", hs[c], 0)
    emit("mov.u32", i, 0)
    prog.label("LOOP")
    for c in range(chains):
        emit("add.f32", xs[c], xs[c], f32(2.0 ** -20))
    if OPS[op]:
        for c in range(chains):
            text = OPS[op].format(x=xs[c], y=ys[c], h=f"%rs{c}", b=hs[c])
            prog.body.append("\t" + text)
        if op == "cvt_e4m3x2":          # fold the 16-bit result into the chain's digest
            for c in range(chains):
                prog.body.append(f"\tcvt.u32.u16 %cv{c}, %rs{c};")
                emit("xor.b32", hs[c], hs[c], f"%cv{c}")
    emit("add.u32", i, i, 1)
    emit("setp.lt.u32", more, i, iters)
    emit("bra", "LOOP", guard=more)
    digest = prog.reg("b32")
    emit("mov.b32", digest, 0)
    for c in range(chains):
        emit("xor.b32", digest, digest, xs[c])
        emit("xor.b32", digest, digest, ys[c])
        emit("xor.b32", digest, digest, hs[c])
    emit("mul.wide.u32", off, gid, 4)
    emit("add.u64", out, out, off)
    emit("st.global.b32", out, digest)
    emit("ret")
    extra = [f"\t.reg .b16 %rs<{chains}>;", f"\t.reg .b32 %cv<{chains}>;"]
    text = module(name, [(".u64", "out_ptr"), (".u32", "iters")], prog, arch)
    return name, text.replace("{\n", "{\n" + "\n".join(extra) + "\n", 1)
