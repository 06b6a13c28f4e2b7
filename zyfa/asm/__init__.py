"""Generated assembly-level kernels (PTX for Hopper sm_90a, gfx950 for MI355X).

Not written yet: issues 5, 6 and 8 track them. Until then the dispatcher registers only
the Triton and reference backends (zyfa.backends).
"""
