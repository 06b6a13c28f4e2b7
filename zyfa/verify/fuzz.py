"""Seeded random cases for every attention path, and the bounds each output is held to.

Shared by tests/test_fuzz.py (CPU: the reference backend, Triton's interpreter, the gfx950
emulator) and bench/fuzz_gpu.py (GPU: Triton, the generated PTX kernel, ``backend="auto"``).
Verification code only: nothing on the production path imports it.

A case is drawn from ``random.Random(f"{path}:{profile}:{seed}")``, so a (path, profile, seed)
triple names it for good: ``run_case(draw_case("triton", 17, "cpu"))`` reproduces case 17.
Every case ends in one of:

  ok        ran, and the output is within its bound (below), finite, contiguous, of the right
            shape and dtype, and the LSE too;
  refused   a deliberate misuse (``Case.invalid``) or a combination the path does not take
            raised ValueError/TypeError (or, for an explicitly named backend that cannot run
            the call, the dispatcher's RuntimeError) whose message names the argument;
  fail      anything else: a wrong or missing error, NaN/Inf, a wrong shape/dtype/layout, or
            an output or LSE outside its bound (``silent`` marks a wrong result that raised
            nothing).

Bounds (``Bounds``): each is relative to a baseline computed in the same case, against float64
attention (``attention_fp64``) on the very values the path was given (for FP8: the dequantized
FP8 values, so the bound is on the kernel's error, not the quantizer's):

  BF16/FP16  rel_err(out) <= K_HALF * rel_err(torch's own attention in that dtype) + floor;
             K_HALF = 3: torch (SDPA, float32 softmax) rounds only its output, a flash kernel
             also rounds P to the input dtype before P.V, which measures up to ~2x torch's
             error on these inputs; 3 leaves margin without hiding a real fault (a wrong mask
             or a dropped block gives errors of 1e-1 and more). Floor: a quarter of the dtype's
             unit roundoff (2^-10 bf16, 2^-13 fp16), for cases where torch's answer is exact or
             nearly so (one key, constant rows) and one rounding in the kernel is not.
  FP8        rel_err(out) <= K_FP8 * rel_err(fp8_attention_spec, same rules) + 2^-9;
             K_FP8 = 1.5: the spec runs the kernels' own algorithm with key blocks of 128; a
             kernel with other blocks (32 in the interpreter, 64 on gfx950) takes other block
             references, so its P codes round differently but alike in size (measured: <= 1.3x
             on the CPU paths, <= 1.02x on the H200). Floor 2^-9 + 2^-11: 2^-9 is the BF16
             output's rounding (half a unit in the last place, relative), which the float64
             spec does not have; 2^-11 the H200's FP8 tensor cores, which keep ~14 bits of
             their sums (a single-key case measured 2.13e-3 > 2^-9).
  LSE        max|lse - lse64| <= K_LSE * baseline + (1 + max|lse64|) * 2^-16 + LSE_ACC * smax,
             smax = max_ij sum_d |q_id k_jd| * softmax_scale (the scores' scale before
             cancellation). Baseline: float32 logsumexp of the float32 scores for BF16/FP16
             (K_LSE 2); the spec's own LSE error for FP8, K_LSE 6: the lean rules' rounding
             bias in the row sum depends on each block's reference, which moves with the
             kernel's block size and its accumulation, so the spec's value is one sample of
             it, not a ceiling (measured up to 4.9x on the H200). LSE_ACC: 2^-12 for FP8 (the
             tensor cores' ~14-bit sums, with a factor 2 to spare: single-key cases, where the
             spec is exact, measured up to 4e-3), 2^-20 for BF16/FP16 (float32 sums).
"""
from __future__ import annotations

import dataclasses
import math
import random
import time

import torch

from ..bench.cases import Case as Shape

# ---------------------------------------------------------------------------------------- bounds
K_HALF = 3.0
HALF_FLOOR = {"bf16": 2.0 ** -10, "fp16": 2.0 ** -13}
K_FP8 = 1.5
FP8_FLOOR = 2.0 ** -9 + 2.0 ** -11
K_LSE = {"bf16": 2.0, "fp16": 2.0, "fp8": 6.0}
LSE_REL_FLOOR = 2.0 ** -16
LSE_ACC = {"bf16": 2.0 ** -20, "fp16": 2.0 ** -20, "fp8": 2.0 ** -12}

PATHS = ("reference", "triton", "gfx950_emulator", "ptx", "auto")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
HEAD_DIMS = ((64, 64), (128, 128), (256, 256), (192, 128))


@dataclasses.dataclass(frozen=True)
class Profile:
    """Sizes a profile draws: ``max_sq`` query rows, ``max_extra_k`` keys past them (causal),
    ``max_bh`` batch x heads, ``cost`` the cap on the work model's units (``case_cost``),
    ``check_rows`` query rows compared against float64 (the last ones; None: all)."""
    max_sq: int
    max_extra_k: int
    max_bh: int
    max_batch: int
    cost: float
    head_dim_weights: tuple          # weights for HEAD_DIMS
    check_rows: int | None = None
    max_elems: float = math.inf      # q + k + v elements (inputs are built in float64 on the CPU)


PROFILES = {
    # Triton's interpreter: ~30 ms per (32-row tile, 32-key block) step on this CPU
    "cpu": Profile(max_sq=70, max_extra_k=60, max_bh=8, max_batch=2, cost=14,
                   head_dim_weights=(0.72, 0.1, 0.06, 0.12)),
    # one H200: a case's time is mostly building inputs and the float64 reference
    "gpu": Profile(max_sq=4100, max_extra_k=1200, max_bh=32, max_batch=2, cost=6e10,
                   head_dim_weights=(0.3, 0.35, 0.1, 0.25), check_rows=192, max_elems=6e6),
}


@dataclasses.dataclass(frozen=True)
class Case:
    """One fuzz case. Its shape, causality, input kind and softmax_scale are a benchmark
    shape's (zyfa.bench.cases.Case), read through: ``case.B``, ``case.Sq``, ``case.input``..."""
    path: str
    profile: str
    seed: int
    shape: Shape
    dtype: str                       # "bf16" | "fp16" | "fp8"
    input_seed: int
    p_rule: str
    ref_rule: str
    scale_mult: float | None         # softmax_scale = scale_mult / sqrt(D); None: the default
    granularity: str | None = None   # FP8: quantize_fp8's granularity
    block_size: int = 64             # FP8 "fine": tokens a scale
    layouts: tuple = ()              # FP8: (q, k, v) descale layouts, see _relayout
    invalid: str | None = None       # a deliberate misuse (INVALID), or None

    def __getattr__(self, name):
        if name.startswith("__") or name == "shape":       # unpickling asks before shape is set
            raise AttributeError(name)
        return getattr(self.shape, name)

    def describe(self) -> str:
        words = [f"{self.path}#{self.seed}", f"B{self.B}", f"Sq{self.Sq}", f"Sk{self.Sk}", f"H{self.Hq}/{self.Hkv}",
                 f"d{self.D}/{self.Dv}", "causal" if self.causal else "full", self.dtype, self.input]
        if self.dtype == "fp8":
            words += [f"{self.granularity}{self.block_size if self.granularity == 'fine' else ''}",
                      "/".join(self.layouts), f"{self.p_rule}/{self.ref_rule}"]
        if self.scale_mult is not None:
            words.append(f"scale*{self.scale_mult:.3g}")
        if self.invalid:
            words.append(f"INVALID:{self.invalid}")
        return " ".join(words)

    def repro(self) -> str:
        return (f"from zyfa.verify.fuzz import draw_case, run_case; "
                f"print(run_case(draw_case({self.path!r}, {self.seed}, {self.profile!r})))")


# ------------------------------------------------------------------------------ what each path takes
def expected_refusal(case: Case) -> list[str] | None:
    """Words one of which a path's refusal must name, or None if the path takes the case.

    Written from each backend's documented limits (not read from its ``supports()``), so that
    a backend refusing what it documents, or running what it says it refuses, shows."""
    if case.path == "ptx":
        why = []
        if case.dtype != "fp8":
            why.append("FP8")
        if (case.D, case.Dv) not in ((128, 128), (192, 128)):
            why.append("head dims")
        if case.dtype == "fp8" and case.ref_rule != "block":
            why.append("ref_rule")
        if case.dtype == "fp8" and "token" in case.layouts[:2]:
            why.append("per-token")
        return why or None
    if case.path == "gfx950_emulator":
        why = []
        if case.p_rule not in ("lean", "lean_quad", "lean_cubic"):
            why.append(repr(case.p_rule))
        if case.ref_rule not in ("block", "block_pow2"):
            why.append(repr(case.ref_rule))
        if not (case.D in (64, 128, 192, 256) and case.Dv in (32, 64, 128)
                and (case.D < 256 or case.Dv <= 64)):
            why += ["head_dim", "value_dim", "head dims"]
        if case.layouts[0] == "token":
            why.append("q_descale")
        if case.layouts[1] == "token":
            why.append("k_descale")
        return why or None
    return None


# The misuses flash_attn_func must refuse: name -> (exception types allowed, a word the message
# must contain, i.e. the argument it names).
_VALUE_ERRORS = (("causal_short_k", "seqlen_q"), ("descale_on_half", "q_descale"), ("missing_descale", "v_descale"),
                 ("descale_shape", "k_descale"), ("nonfinite_descale", "k_descale"), ("head_dims", "head dims"),
                 ("gqa_ratio", "kv_heads"), ("p_rule", "p_rule"), ("ref_rule", "ref_rule"), ("batch", "batch"),
                 ("backend_name", "backend"))
_TYPE_ERRORS = (("descale_dtype", "q_descale"), ("dtype_mix", "dtype"), ("float32_inputs", "dtype"),
                ("causal_type", "causal"))
INVALID = {**{n: ((ValueError,), w) for n, w in _VALUE_ERRORS}, **{n: ((TypeError,), w) for n, w in _TYPE_ERRORS},
           "softmax_scale": ((ValueError, TypeError), "softmax_scale")}
_CPU_ONLY_INVALID = ("nonfinite_descale",)     # validation reads descale values on CPU tensors only


# ------------------------------------------------------------------------------------- the draw
def _weighted(rng: random.Random, items, weights):
    return rng.choices(list(items), weights=list(weights))[0]


def case_cost(path: str, profile: str, B, Sq, Sk, Hq, D, causal) -> float:
    """The work model a profile caps. CPU: Triton's interpreter steps (32-row tile x 32-key
    block, causal blocks above the diagonal skipped) for Triton and the reference, emulated
    workgroup x 64-key blocks x 2 for the gfx950 emulator. GPU: FLOPs of the float64 reference
    on the checked rows plus the kernel's, both ~ 4 B Hq Sq Sk D."""
    if profile == "gpu":
        rows = min(Sq, PROFILES["gpu"].check_rows)
        return 4.0 * B * Hq * Sk * D * (Sq / 40 + rows)      # the kernel runs ~40x float64's rate
    if path == "gfx950_emulator":
        return 2 * B * Hq * -(-Sq // 256) * -(-Sk // 64)
    steps = 0
    for i in range(-(-Sq // 32)):
        last = min(Sk, 32 * i + 32 + Sk - Sq) if causal else Sk
        steps += -(-last // 32)
    return B * Hq * steps


def _draw_seqlens(rng, prof: Profile, causal: bool, gpu: bool):
    if gpu:
        top = _weighted(rng, (64, 512, 1500, prof.max_sq), (0.3, 0.3, 0.25, 0.15))
    else:
        top = prof.max_sq
    u = rng.random()
    Sq = 1 if u < 0.08 else rng.randint(1, top)
    if gpu and rng.random() < 0.2:
        Sq = max(1, Sq // 64 * 64)           # a multiple of the tile now and then
    if causal:
        extra = 0 if rng.random() < 0.25 else rng.randint(1, min(prof.max_extra_k, max(8, 2 * Sq)))
        Sk = Sq + extra
    else:
        Sk = rng.randint(1, top + prof.max_extra_k // 2)
    return Sq, Sk


def _draw_heads(rng, prof: Profile):
    """(heads, kv_heads): GQA ratio 1, 2 or 4, or MQA (one kv head)."""
    ratio = rng.choice((1, 2, 4, "mqa"))
    if ratio == "mqa":
        return rng.choice((2, 3, 4, 8, 16) if prof.max_bh > 8 else (2, 3, 4)), 1
    Hkv = rng.choice((1, 2, 4) if prof.max_bh > 8 else (1, 2))
    return Hkv * ratio, Hkv


def _draw_dims(rng, path: str, prof: Profile):
    if path == "gfx950_emulator":
        D = _weighted(rng, (64, 128, 192, 256), (0.45, 0.3, 0.2, 0.05))
        Dv = 128 if D == 192 and rng.random() < 0.7 else rng.choice((32, 64, 96, 128))
        return D, Dv
    weights = prof.head_dim_weights
    if path == "ptx":
        weights = (0.03, 0.6, 0.02, 0.35)
    return _weighted(rng, HEAD_DIMS, weights)


def _draw_fp8(rng, path: str):
    """(granularity, block_size, layouts) for an FP8 case.

    Layouts re-express (or refine) the quantizer's descales: "scalar", "hkv" (Hkv,),
    "b_hkv" (B, Hkv), "token" (q/k per token, v per channel); each coarse layout may be
    replaced by any finer one."""
    coarse_only = path in ("ptx", "gfx950_emulator")
    gran = _weighted(rng, ("head", "tensor", "fine"), (0.55, 0.4, 0.05 if path == "ptx" else 0.15)
                     if coarse_only else (0.4, 0.25, 0.35))
    order = ("scalar", "hkv", "b_hkv", "token")
    start = {"tensor": 0, "head": 2, "fine": 3}[gran]
    layouts = []
    for who in "qkv":
        choices = order[start:]
        if coarse_only and who != "v" and start < 3 and rng.random() < 0.95:
            choices = order[start:3]
        layouts.append(rng.choice(choices))
    return gran, rng.choice((16, 32, 64)), tuple(layouts)


def draw_case(path: str, seed: int, profile: str = "cpu") -> Case:
    """The case (path, profile, seed) names; deterministic across runs and machines."""
    from ..spec.rules import P_RULES, REF_RULES
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    prof = PROFILES[profile]
    gpu = profile == "gpu"
    rng = random.Random(f"{path}:{profile}:{seed}")
    if path == "gfx950_emulator":
        dtype = "fp8"
    elif path == "ptx":
        dtype = _weighted(rng, ("fp8", "bf16", "fp16"), (0.95, 0.03, 0.02))
    else:
        dtype = _weighted(rng, ("fp8", "bf16", "fp16"), (0.5, 0.3, 0.2))
    D, Dv = _draw_dims(rng, path, prof)
    causal = rng.random() < 0.7
    for _ in range(200):
        B = rng.randint(1, prof.max_batch)
        Sq, Sk = _draw_seqlens(rng, prof, causal, gpu)
        Hq, Hkv = _draw_heads(rng, prof)
        elems = B * (Sq * Hq * D + Sk * Hkv * (D + Dv))
        if B * Hq <= prof.max_bh and elems <= prof.max_elems and case_cost(path, profile, B, Sq, Sk, Hq, D,
                                                                             causal) <= prof.cost:
            break
    else:                                   # the last draw, shrunk to fit
        B, Hq, Hkv, Sq = 1, 1, 1, min(Sq, 32)
        Sk = min(Sk, Sq + 32) if causal else min(Sk, 64)
    if path == "gfx950_emulator":
        p_rule = _weighted(rng, ("lean", "lean_quad", "lean_cubic", "exact", "lean_cubic_f16"),
                           (0.3, 0.3, 0.3, 0.05, 0.05))
        ref_rule = _weighted(rng, ("block", "block_pow2", "running"), (0.47, 0.47, 0.06))
    else:
        p_rule = rng.choice(P_RULES)
        ref_rule = _weighted(rng, REF_RULES, (0.93, 0.03, 0.04) if path == "ptx" else (0.4, 0.3, 0.3))
    gran, block_size, layouts = _draw_fp8(rng, path) if dtype == "fp8" else (None, 64, ())
    scale_mult = math.exp(rng.uniform(math.log(0.25), math.log(2.0))) if rng.random() < 0.25 else None
    invalid = None
    if path != "gfx950_emulator" and rng.random() < 0.12:
        options = [n for n in INVALID
                   if (n not in _CPU_ONLY_INVALID or not gpu)
                   and (n != "causal_short_k" or (causal and Sq >= 2))
                   and (n not in ("missing_descale", "descale_shape", "descale_dtype", "nonfinite_descale")
                        or dtype == "fp8")
                   and (n != "descale_on_half" or dtype != "fp8")]
        invalid = rng.choice(options)
    shape = Shape("fuzz", f"{path}#{seed}", B, Sq, Sk, Hq, Hkv, D, Dv, causal, rng.choice(("gaussian", "realistic")),
                  None if scale_mult is None else scale_mult / math.sqrt(D))
    return Case(path, profile, seed, shape, dtype, rng.randrange(2 ** 31), p_rule, ref_rule, scale_mult, gran,
                block_size, layouts, invalid)


# ------------------------------------------------------------------------------------- the inputs
def _jitter(shape, gen: torch.Generator, device):
    """A random factor in [2^-0.5, 2^0.5] per element."""
    return torch.exp2(torch.rand(shape, generator=gen, dtype=torch.float64) - 0.5).to(device)


def _relayout(x, case: Case, gen: torch.Generator):
    """FP8Inputs with descales in the case's layouts. The quantizer's descale is kept where the
    layout is its own, else broadcast to the finer layout and multiplied by a random factor in
    [2^-0.5, 2^0.5] per element of that layout, so the layouts really differ (the FP8 values
    stay; the descales say what they mean, and the references read the same descales)."""
    from ..quantize import FP8Inputs
    B, Sq, Hq, _ = x.q.shape
    Sk, Hkv, Dv = x.k.shape[1], x.k.shape[2], x.v.shape[-1]
    out = []
    for who, d, layout in zip("qkv", (x.q_descale, x.k_descale, x.v_descale), case.layouts):
        dev = d.device
        if d.dim() == 3 or (d.dim() == 2 and layout == "b_hkv") or (d.dim() == 0 and layout == "scalar"):
            out.append(d)
            continue
        if layout == "token":
            coarse = d.reshape(1, 1).expand(B, Hkv) if d.dim() == 0 else d
            if who == "q":
                full = coarse.repeat_interleave(Hq // Hkv, 1)[..., None].expand(B, Hq, Sq)
            else:
                full = coarse[..., None].expand(B, Hkv, Sk if who == "k" else Dv)
        elif d.dim() == 0:
            full = d.expand({"hkv": (Hkv,), "b_hkv": (B, Hkv)}[layout])
        else:
            raise AssertionError(f"cannot coarsen the {who} descale {tuple(d.shape)} to {layout}")
        out.append((full.double() * _jitter(full.shape, gen, dev)).float().contiguous())
    return FP8Inputs(x.q, x.k, x.v, *out)


def make_inputs(case: Case, device="cpu") -> dict:
    """flash_attn_func's keyword arguments for the case (before any misuse)."""
    from .. import quantize_fp8
    from ..activations import make
    src = torch.bfloat16 if case.dtype == "fp8" else DTYPES[case.dtype]
    q, k, v = make(case.input, case.B, case.Sq, case.Hq, case.Hkv, case.D, case.Dv, seqlen_k=case.Sk,
                   seed=case.input_seed, dtype=src, device=device)
    kw = dict(q=q, k=k, v=v)
    if case.dtype == "fp8":
        x = quantize_fp8(q, k, v, granularity=case.granularity, block_size=case.block_size)
        x = _relayout(x, case, torch.Generator().manual_seed(case.input_seed))
        kw = x.kwargs()
    kw.update(softmax_scale=case.softmax_scale, causal=case.causal)
    if case.dtype == "fp8":            # the P and reference rules are FP8's (newer zyfa refuses them otherwise)
        kw.update(p_rule=case.p_rule, ref_rule=case.ref_rule)
    return kw


def apply_misuse(case: Case, kw: dict) -> dict:
    """The case's deliberate misuse applied to flash_attn_func's arguments."""
    kw = dict(kw)
    q, k, v = kw["q"], kw["k"], kw["v"]
    dev = q.device
    name = case.invalid
    if name == "causal_short_k":          # keys cut to seqlen_q - 1
        n = q.shape[1] - 1
        kw["k"], kw["v"] = k[:, :n], v[:, :n]
        if kw.get("k_descale") is not None and kw["k_descale"].dim() == 3:
            kw["k_descale"] = kw["k_descale"][..., :n]
    elif name == "descale_on_half":
        kw["q_descale"] = torch.ones((), device=dev)
    elif name == "missing_descale":
        kw["v_descale"] = None
    elif name == "descale_shape":
        kw["k_descale"] = torch.ones(k.shape[2] + 1, device=dev)
    elif name == "descale_dtype":
        kw["q_descale"] = kw["q_descale"].double()
    elif name == "nonfinite_descale":
        d = kw["k_descale"].clone()
        d.view(-1)[0] = float("nan")
        kw["k_descale"] = d
    elif name == "head_dims":
        dv = 128 if v.shape[-1] != 128 else 64
        kw["v"] = torch.zeros(*v.shape[:3], dv, dtype=v.dtype, device=dev)
        if kw.get("v_descale") is not None:
            kw["v_descale"] = torch.ones((), device=dev)
    elif name == "gqa_ratio":             # heads not a multiple of kv_heads
        if k.shape[2] > 1:
            kw["q"] = torch.cat([q, q[:, :, :1]], 2)
        else:                             # one query head over two kv heads
            kw["q"], kw["k"], kw["v"] = q[:, :, :1], torch.cat([k, k], 2), torch.cat([v, v], 2)
        for n in ("q_descale", "k_descale", "v_descale"):
            if kw.get(n) is not None:
                kw[n] = torch.ones((), device=dev)
    elif name == "softmax_scale":
        kw["softmax_scale"] = random.Random(case.seed).choice((0.0, -0.125, float("nan"), float("inf"), True))
    elif name == "p_rule":
        kw["p_rule"] = "cubic"
    elif name == "ref_rule":
        kw["ref_rule"] = "pow2"
    elif name == "dtype_mix":
        other = torch.float16 if q.dtype == torch.bfloat16 else torch.bfloat16
        kw["k"] = k.to(other) if k.dtype != torch.float8_e4m3fn else k.float().to(other)
    elif name == "float32_inputs":
        kw.update(q=q.float(), k=k.float(), v=v.float(), q_descale=None, k_descale=None, v_descale=None)
    elif name == "batch":
        kw["k"], kw["v"] = torch.cat([k, k], 0), torch.cat([v, v], 0)
    elif name == "causal_type":
        kw["causal"] = int(kw["causal"])
    elif name == "backend_name":
        kw["backend"] = "cuda"
    return kw


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
    from ..spec.reference import causal_limit
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
    from ..quantize import FP8Inputs
    from ..spec.reference import attention_fp64, fp8_attention_spec
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
                 + LSE_ACC[case.dtype] * smax)
    return out_bound, lse_bound


def _call(case: Case, kw: dict):
    """Run the case's path: (out, lse, backend name)."""
    if case.path == "gfx950_emulator":
        from .gfx950.attention import emulate_attention
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
                       "K_LSE": K_LSE, "LSE_REL_FLOOR": LSE_REL_FLOOR, "LSE_ACC": LSE_ACC}}


# ------------------------------------------------------------------------------ compile warm-up
def _ptx_bound(case: Case) -> bool:
    """Whether the case's kernel is the generated PTX one (path ptx, or auto on an H200)."""
    return (case.invalid is None and case.dtype == "fp8" and case.path in ("ptx", "auto")
            and (case.D, case.Dv) in ((128, 128), (192, 128)) and case.ref_rule == "block"
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


def warm(cases: list[Case], device="cuda") -> int:
    """Run each case's kernel once, results unchecked and errors ignored (run_case judges them
    later): the compilations land in Triton's on-disk cache (shared between processes) or, for
    the generated PTX kernel, in this process's cache. Returns how many raised."""
    raised = 0
    for case in cases:
        try:
            _call(case, make_inputs(case, device))
        except Exception:  # noqa: BLE001
            raised += 1
    if device != "cpu":
        torch.cuda.synchronize()
    return raised
