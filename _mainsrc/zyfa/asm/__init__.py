"""Generated assembly-level kernels (PTX for Hopper sm_90a; gfx950 for MI355X next).

``zyfa.asm.program`` is the target-neutral core: typed virtual registers, instructions
written from a per-target op table, labels, loops unrolled in Python, and register
declarations generated at the end. ``zyfa.asm.ptx`` is the sm_90a target: its op table,
ptxas assembly and SASS inspection, a cuda-python loader, and the generated kernels.

Status: the framework and the first generated building block (the FP8 P-code kernel of
the lean rules) exist; the generated attention kernel does not yet, so the dispatcher
still registers only the Triton and reference backends (issue 5).
"""
