"""Generate SASS of the INT8 and E4M3 d128 causal exact kernels; print loop stats."""
import sys, os, collections
sys.path.insert(0, os.environ.get("ZYFA", "/tmp/i8fold"))
from zyfa.asm.ptx import attention as attn
from zyfa.asm.ptx.assemble import assemble
from zyfa.verify.ptx import sass as S
tag = sys.argv[1]
dqk = int(sys.argv[2]) if len(sys.argv) > 2 else 128
cases = {"int8": dict(int8_qk=True), "e4m3": dict(), "e4m3_slot": dict(slot_keys=True)}
for name, kw in cases.items():
    if name != "int8" and tag != "base":
        continue
    kn, ptx = attn.attention_kernel("exact", True, dqk, "sm_90a", **kw)
    a = assemble(ptx)
    base = f"/tmp/i8fold/out/{tag}_{name}_d{dqk}"
    open(base + ".ptx", "w").write(ptx)
    open(base + ".cubin", "wb").write(a.cubin)
    text = a.sass()
    open(base + ".sass", "w").write(text)
    loop = S.block_loop(S.instructions(text), dqk // 32)
    mix = collections.Counter(i.mnemonic.split(".")[0] for i in loop)
    print(f"{tag} {name} d{dqk}: regs {a.registers} spill {a.spill_bytes}; loop {loop[0].addr:#x}..{loop[-1].addr:#x} "
          f"{len(loop)} instrs, {S.static_cycles(loop)} static cycles")
    print("   ", ", ".join(f"{m} {n}" for m, n in mix.most_common()))
