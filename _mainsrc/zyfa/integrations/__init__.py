"""Integrations with frameworks: ``zyfa.integrations.transformers``."""
