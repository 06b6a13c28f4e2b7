import sys, os, dataclasses
from zyfa.asm.ptx import attention as attn, layout as lay
from zyfa.asm.ptx.assemble import assemble
tag, long = sys.argv[1], len(sys.argv) > 2 and sys.argv[2] == "long"
if long:
    P = lay.layout_for
    def lab(dqk, dtype="e4m3", dv=None, packed=False, int8_qk=False, long=False, wide=False):
        if int8_qk and dqk == 128:
            return dataclasses.replace(P(dqk, dv=dv, long=True), int8_qk=True)
        return P(dqk, dtype, dv, packed, int8_qk, long, wide)
    attn.layout_for = lab
for d in (128,):
    name, ptx = attn.attention_kernel("exact", True, d, "sm_90a", int8_qk=True)
    a = assemble(ptx)
    fn = f"int8_{tag}{'_long' if long else ''}"
    open(f"out/{fn}.sass","w").write(a.sass()); open(f"out/{fn}.ptx","w").write(ptx)
    print(fn, "regs", a.registers, "spill", a.spill_bytes)
