"""What both generated kernels share in what they take: FP8 only, a set of P and reference
rules, per-head (or per-tensor) q/k descales. Each kernel's backend.py adds its own limits."""
from __future__ import annotations


def fp8_refusal(p, kernel: str, head_dims_ok: bool, head_dims_text: str, p_rules: tuple,
                ref_rules: tuple) -> tuple[bool, str] | None:
    """None if a zyfa.dispatch.Problem fits these limits, else (False, reason)."""
    if not p.is_fp8:
        return False, f"the {kernel} is FP8 only"
    if p.int8_qk:
        return False, f"the {kernel} reads E4M3 q and k, not INT8"
    if not head_dims_ok:
        return False, f"the {kernel} takes head dims {head_dims_text}, not {p.head_dims}"
    if p.p_rule not in p_rules:
        return False, f"the {kernel} implements p_rule {p_rules}, not {p.p_rule!r}"
    if p.ref_rule not in ref_rules:
        return False, f"the {kernel} implements ref_rule {ref_rules}, not {p.ref_rule!r}"
    if p.per_token_descales:
        return False, f"the {kernel} takes per-head (or per-tensor) q/k descales, not per-token"
    return None
