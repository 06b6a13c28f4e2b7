"""Generated assembly-level kernels (PTX for Hopper sm_90a; gfx950 for MI355X next).

``zyfa.asm.program`` is the target-neutral core: typed virtual registers, instructions
written from a per-target op table, labels, loops unrolled in Python, and register
declarations generated at the end. ``zyfa.asm.ptx`` is the sm_90a target: its op table,
ptxas assembly and SASS inspection, a cuda-python loader, and the generated kernels.

``zyfa.asm.gfx950`` is the MI355X target, written in stages. Each target's backend.py is
what the dispatcher registers (zyfa.backends).
"""
