"""Running a fuzz case and judging it against float64 (the bounds are explained in
zyfa.verify.fuzz), summaries, and which cases share a compiled kernel."""
from __future__ import annotations

import dataclasses
import math
import time

import torch


from .cases import PTX_HEAD_DIMS, Case, INVALID, PROFILES, apply_misuse, expected_refusal, make_inputs

# ---------------------------------------------------------------------------------------- bounds
K_HALF = 3.0
HALF_FLOOR = {"bf16": 2.0 ** -10, "fp16": 2.0 ** -13}
K_FP8 = 1.5
FP8_FLOOR = 2.0 ** -9 + 2.0 ** -11
K_LSE = {"bf16": 2.0, "fp16": 2.0, "fp8": 6.0}
LSE_REL_FLOOR = 2.0 ** -16
LSE_ACC = {"bf16": 2.0 ** -20, "fp16": 2.0 ** -20}
FP8_MMA_STEP = 2.0 ** -13            # an FP8 tensor-core step (k = 32) keeps ~13 fraction bits


def lse_acc(dtype: str, head_dim: int) -> float:
    """The scores' accumulation error per unit of smax: float32 sums for BF16/FP16; for FP8
    one truncation of 2^-13 per 32-wide step of the head dim (module docstring)."""
    return FP8_MMA_STEP * -(-head_dim // 32) if dtype == "fp8" else LSE_ACC[dtype]


# ------------------------------------------------------------------------------------------ checks
@dataclasses.dataclass
class Outcome:
    case: Case
    status: str                          # "ok" | "refused" | "fail"
    message: str = ""
    silent: bool = False                 # a wrong result that raised nothing
    err: float | None = None
    bound: float | None = None
    lse_err: float | None = None
    lse_bound: float | None = None
    seconds: float = 0.0
    backend: str | None = None           # what "auto" chose

    def __str__(self):
        s = f"{self.status:7s} {self.case.describe()}"
        if self.err is not None:
            s += f" err {self.err:.3e} (bound {self.bound:.3e})"
        if self.lse_err is not None:
            s += f" lse {self.lse_err:.2e} (bound {self.lse_bound:.2e})"
        if self.message:
            s += f" -- {self.message}"
        return s

    def as_dict(self) -> dict:
        d = {k: v for k, v in dataclasses.asdict(self).items() if k != "case"}
        d["case"] = self.case.describe()
        d["repro"] = self.case.repro()
        return d


def rel_err(out, ref) -> float:
    out, ref = out.double(), ref.double()
    n = ref.norm().item()
    return (out - ref).norm().item() / n if n > 0 else (out - ref).norm().item()


def _torch_attention(q, k, v, causal, scale, Sk_full):
    """torch's own attention in the inputs' dtype (SDPA, bottom-right mask) on the rows given."""
    Sq = q.shape[1]
    mask = None
    if causal:
        rows = torch.arange(Sk_full - Sq, Sk_full, device=q.device)      # the last Sq rows of a Sk_full square
        mask = torch.arange(k.shape[1], device=q.device)[None, :] <= rows[:, None]
    o = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask, scale=scale,
        enable_gqa=q.shape[2] != k.shape[2])
    return o.transpose(1, 2)


def _lse_fp32(q, k, causal, scale):
    """float32 logsumexp of float32 scores (the LSE baseline for BF16/FP16), (B, Hq, Sq)."""
    from ...spec.reference import causal_limit
    Hq, Hkv = q.shape[2], k.shape[2]
    kk = k.float().permute(0, 2, 1, 3).repeat_interleave(Hq // Hkv, 1)
    s = torch.einsum("bqhd,bhkd->bhqk", q.float(), kk) * scale
    if causal:
        limit = causal_limit(q.shape[1], k.shape[1], q.device)
        s = s.masked_fill(torch.arange(k.shape[1], device=q.device)[None] > limit[:, None], float("-inf"))
    return torch.logsumexp(s, -1)


def baseline(case: Case, kw: dict, rows: slice):
    """(ref, lse_ref, base_err, base_lse_err, smax) on the query rows ``rows``: float64 attention on
    the values the path was given, and the baseline's error against it (module docstring)."""
    from ...quantize import FP8Inputs
    from ...spec.reference import attention_fp64, fp8_attention_spec
    q, k, v = kw["q"], kw["k"], kw["v"]
    scale = kw["softmax_scale"] if kw["softmax_scale"] is not None else 1.0 / math.sqrt(case.D)
    if case.dtype == "fp8":
        qd = kw["q_descale"]
        qd_rows = qd[..., rows] if qd.dim() == 3 else qd
        x = FP8Inputs(q[:, rows], k, v, qd_rows, kw["k_descale"], kw["v_descale"])
        ref, lse_ref = attention_fp64(*x.dequantized(), causal=case.causal, softmax_scale=scale, return_lse=True)
        spec, lse_spec = fp8_attention_spec(**x.kwargs(), causal=case.causal, softmax_scale=scale,
                                            p_rule=case.p_rule, ref_rule=case.ref_rule, return_lse=True)
        qf, kf, _ = x.dequantized()
        return (ref, lse_ref, rel_err(spec, ref), (lse_spec - lse_ref).abs().max().item(),
                _score_scale(qf, kf, scale))
    qr = q[:, rows]
    ref, lse_ref = attention_fp64(qr, k, v, causal=case.causal, softmax_scale=scale, return_lse=True)
    torch_out = _torch_attention(qr, k, v, case.causal, scale, k.shape[1])
    lse32 = _lse_fp32(qr, k, case.causal, scale)
    return (ref, lse_ref, rel_err(torch_out, ref), (lse32.double() - lse_ref).abs().max().item(),
            _score_scale(qr, k, scale))


def _score_scale(q, k, scale) -> float:
    """max_ij sum_d |q_id k_jd| * scale: what a score's accumulation error scales with."""
    Hq, Hkv = q.shape[2], k.shape[2]
    kk = k.double().abs().permute(0, 2, 1, 3).repeat_interleave(Hq // Hkv, 1)
    return (torch.einsum("bqhd,bhkd->bhqk", q.double().abs(), kk).amax().item()) * scale


def bounds(case: Case, base_err: float, base_lse_err: float, lse_ref, smax: float) -> tuple[float, float]:
    """(output bound, LSE bound) for a case given its baselines (module docstring)."""
    if case.dtype == "fp8":
        out_bound = K_FP8 * base_err + FP8_FLOOR
    else:
        out_bound = K_HALF * base_err + HALF_FLOOR[case.dtype]
    lse_bound = (K_LSE[case.dtype] * base_lse_err + (1.0 + lse_ref.abs().max().item()) * LSE_REL_FLOOR
                 + lse_acc(case.dtype, case.D) * smax)
    return out_bound, lse_bound


def _call(case: Case, kw: dict):
    """Run the case's path: (out, lse, backend name)."""
    if case.path == "gfx950_emulator":
        from ..gfx950.attention import emulate_attention
        out, lse = emulate_attention(kw["q"], kw["k"], kw["v"], kw["q_descale"], kw["k_descale"], kw["v_descale"],
                                     causal=kw["causal"], p_rule=case.p_rule, softmax_scale=kw["softmax_scale"],
                                     ref_rule=case.ref_rule)
        return out, lse, "gfx950_emulator"
    import zyfa
    backend = kw.pop("backend", case.path)
    chosen = backend
    if backend == "auto" and case.invalid is None:
        explained = zyfa.explain(**{n: x for n, x in kw.items() if n != "return_lse"}, backend="auto")
        chosen = explained.splitlines()[0].removeprefix("selected: ").split(" ")[0]
    out, lse = zyfa.flash_attn_func(**kw, return_lse=True, backend=backend)
    return out, lse, chosen


def _check_raised(e: Exception, types: tuple, words: list[str]) -> str | None:
    """None if the exception is an acceptable refusal naming one of ``words``, else why not."""
    msg = str(e)
    if not isinstance(e, types):
        return f"raised {type(e).__name__} (wanted {'/'.join(t.__name__ for t in types)}): {msg[:300]}"
    if not any(w.lower() in msg.lower() for w in words):
        return f"{type(e).__name__} does not name {' or '.join(words)}: {msg[:300]}"
    return None


def run_case(case: Case, device="cpu") -> Outcome:
    """Draw the inputs, run the path, and judge the result (module docstring)."""
    t0 = time.perf_counter()
    try:
        kw = make_inputs(case, device)
    except Exception as e:  # noqa: BLE001  (the quantizer is part of what is fuzzed)
        return Outcome(case, "fail", f"building inputs raised {type(e).__name__}: {e}",
                       seconds=time.perf_counter() - t0)
    out = _judge(case, kw)
    out.seconds = time.perf_counter() - t0
    return out


def _judge(case: Case, kw: dict) -> Outcome:
    if case.invalid is not None:
        types, word = INVALID[case.invalid]
        bad = apply_misuse(case, kw)
        try:
            _call(case, bad)
        except Exception as e:  # noqa: BLE001
            why = _check_raised(e, types, [word])
            return Outcome(case, "fail", why) if why else Outcome(case, "refused", f"{type(e).__name__}: {e}"[:160])
        return Outcome(case, "fail", f"misuse {case.invalid!r} was accepted", silent=True)
    refusal = expected_refusal(case)
    try:
        out, lse, chosen = _call(case, dict(kw))
    except Exception as e:  # noqa: BLE001
        if refusal is None:
            return Outcome(case, "fail", f"raised {type(e).__name__} on a case the path takes: {str(e)[:400]}")
        # an explicitly named backend that cannot run: the dispatcher's RuntimeError ("cannot run this call")
        types = (ValueError, TypeError) if case.path == "gfx950_emulator" else (ValueError, TypeError, RuntimeError)
        why = _check_raised(e, types, refusal)
        return Outcome(case, "fail", why) if why else Outcome(case, "refused", f"{type(e).__name__}: {e}"[:160])
    result = _check_output(case, kw, out, lse)
    result.backend = chosen
    if refusal is not None and result.status == "ok":
        result.status, result.message = "fail", f"ran a case its documented limits exclude ({', '.join(refusal)})"
    return result


def _check_output(case: Case, kw: dict, out, lse) -> Outcome:
    B, Sq, Hq, Dv = case.B, case.Sq, case.Hq, case.Dv
    want_dtype = (torch.float32 if case.path == "gfx950_emulator"
                  else torch.float16 if case.dtype == "fp16" else torch.bfloat16)
    problems = []
    if tuple(out.shape) != (B, Sq, Hq, Dv):
        problems.append(f"out shape {tuple(out.shape)} != {(B, Sq, Hq, Dv)}")
    if out.dtype != want_dtype:
        problems.append(f"out dtype {out.dtype} != {want_dtype}")
    if not out.is_contiguous():
        problems.append(f"out not contiguous (strides {out.stride()})")
    if tuple(lse.shape) != (B, Hq, Sq) or lse.dtype != torch.float32:
        problems.append(f"lse {tuple(lse.shape)} {lse.dtype} != {(B, Hq, Sq)} float32")
    if problems:
        return Outcome(case, "fail", "; ".join(problems), silent=True)
    nonfinite = int((~torch.isfinite(out)).sum()) + int((~torch.isfinite(lse)).sum())
    if nonfinite:
        where = torch.nonzero(~torch.isfinite(out))[:3].tolist()
        return Outcome(case, "fail", f"{nonfinite} non-finite values in out/lse (out at {where})", silent=True)
    check = PROFILES[case.profile].check_rows
    rows = slice(max(0, Sq - check), Sq) if check else slice(0, Sq)
    ref, lse_ref, base_err, base_lse_err, smax = baseline(case, kw, rows)
    err = rel_err(out[:, rows], ref)
    lse_err = (lse[..., rows].double() - lse_ref).abs().max().item()
    bound, lse_bound = bounds(case, base_err, base_lse_err, lse_ref, smax)
    o = Outcome(case, "ok", f"baseline err {base_err:.3e}", err=err, bound=bound, lse_err=lse_err, lse_bound=lse_bound)
    if not (err <= bound and lse_err <= lse_bound):
        o.status, o.silent = "fail", True
        o.message = ("output" if err > bound else "LSE") + f" outside its bound; baseline err {base_err:.3e}, " \
                                                          f"baseline lse err {base_lse_err:.2e}"
    return o


def summarize(outcomes: list[Outcome]) -> dict:
    """Counts per path and status, the worst err/bound ratios, and the failures."""
    paths = {}
    for o in outcomes:
        p = paths.setdefault(o.case.path, {"cases": 0, "ok": 0, "refused": 0, "fail": 0, "silent": 0,
                                            "seconds": 0.0, "worst_ratio": 0.0, "worst_lse_ratio": 0.0,
                                            "backends": {}})
        p["cases"] += 1
        p[o.status] += 1
        p["silent"] += o.silent
        p["seconds"] += o.seconds
        if o.err is not None and o.bound:
            p["worst_ratio"] = max(p["worst_ratio"], o.err / o.bound)
            p["worst_lse_ratio"] = max(p["worst_lse_ratio"], o.lse_err / o.lse_bound)
        if o.backend and o.status == "ok":
            p["backends"][o.backend] = p["backends"].get(o.backend, 0) + 1
    return {"paths": paths, "failures": [o.as_dict() for o in outcomes if o.status == "fail"],
            "bounds": {"K_HALF": K_HALF, "HALF_FLOOR": HALF_FLOOR, "K_FP8": K_FP8, "FP8_FLOOR": FP8_FLOOR,
                       "K_LSE": K_LSE, "LSE_REL_FLOOR": LSE_REL_FLOOR, "LSE_ACC": LSE_ACC, "FP8_MMA_STEP": FP8_MMA_STEP}}


# ---------------------------------------------------------------------------- compile keys
def _ptx_bound(case: Case) -> bool:
    """Whether the case's kernel is the generated PTX one (path ptx, or auto on an H200)."""
    return (case.invalid is None and case.dtype == "fp8" and case.path in ("ptx", "auto")
            and (case.D, case.Dv) in PTX_HEAD_DIMS and case.ref_rule == "block"
            and "token" not in case.layouts[:2])


def compile_key(case: Case):
    """What makes the case's kernel a separate compilation, over-approximated: the generated PTX
    kernel per (P rule, causal, head dim); a Triton kernel also per dtype, rules, descale
    kind, seqlen bucket (its tile) and the integer specializations (== 1, multiple of 16)."""
    if case.invalid is not None or expected_refusal(case) is not None:
        return None
    if _ptx_bound(case):
        return ("ptx", case.p_rule, case.causal, case.D)
    spec = tuple((n == 1, n % 16 == 0) for n in (case.Sq, case.Sk, case.Hq, case.Hkv))
    fp8 = case.dtype == "fp8"
    return ("triton", case.dtype, case.D, case.Dv, case.causal, case.p_rule if fp8 else None,
            case.ref_rule if fp8 else None, fp8 and "token" in case.layouts[:2], max(1024, 1 << (case.Sk - 1).bit_length()),
            spec)
