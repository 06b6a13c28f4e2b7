"""gfx950 verification code the production path never imports: the emulator, its Triton references, the cycle model."""
