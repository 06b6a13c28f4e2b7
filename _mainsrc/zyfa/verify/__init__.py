"""Verification code the production path never imports: the gfx950 emulator and its checks,
Triton compile checks, PTX microbenchmarks and building-block kernels."""
