import dataclasses, functools
from zyfa.asm.ptx import attention as attn, layout as lay
from zyfa.asm.ptx.assemble import assemble
P = lay.layout_for.__wrapped__ if hasattr(lay.layout_for,'__wrapped__') else lay.layout_for
def lab(dqk, dtype="e4m3", dv=None, packed=False, int8_qk=False, long=False, wide=False):
    if int8_qk and dqk == 128:
        return dataclasses.replace(P(dqk, dv=dv, long=True), int8_qk=True)
    return P(dqk, dtype, dv, packed, int8_qk, long, wide)
attn.layout_for = lab
name, ptx = attn.attention_kernel("exact", True, 128, "sm_90a", int8_qk=True)
a = assemble(ptx)
open("out/int8_long.sass","w").write(a.sass()); open("out/int8_long.ptx","w").write(ptx)
print(name, a.registers, a.spill_bytes, lab(128, dv=128, int8_qk=True).shared_bytes, lab(128,dv=128,int8_qk=True).threads)
