"""Verification code the production path never imports."""
