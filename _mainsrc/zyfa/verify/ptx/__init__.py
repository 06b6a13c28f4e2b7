"""Verification code the production path never imports: kernels and wrappers that check pieces of the generated Hopper kernel on their own."""
