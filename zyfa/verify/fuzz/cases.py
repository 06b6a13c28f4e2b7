"""The fuzz cases: profiles, what each path takes, the draw, the inputs and deliberate misuses
(zyfa.verify.fuzz has the bounds and why)."""
from __future__ import annotations

import dataclasses
import math
import random

import torch

from ...bench.cases import Case as Shape
from ...spec.shapes import HEAD_DIMS

PATHS = ("reference", "triton", "gfx950_emulator", "ptx", "auto")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


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
    granularity: str | None = None   # FP8: quantize_fp8's granularity, or "int8": quantize_int8_qk
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
            words += [f"{self.granularity}{self.block_size if self.granularity in ('fine', 'int8') else ''}",
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
# the generated Hopper kernels' head dims as documented (FP8 and 16-bit alike), written here
# rather than imported, so that the kernels' own list is checked against the documents
PTX_HEAD_DIMS = ((64, 64), (128, 128), (192, 128), (256, 256))


def expected_refusal(case: Case) -> list[str] | None:
    """Words one of which a path's refusal must name, or None if the path takes the case.

    Written from each backend's documented limits (not read from its ``supports()``), so that
    a backend refusing what it documents, or running what it says it refuses, shows."""
    if case.path == "ptx":
        why = []
        if (case.D, case.Dv) not in PTX_HEAD_DIMS:
            why.append("head dims")
        if case.dtype == "fp8" and case.ref_rule != "block":
            why.append("ref_rule")
        if case.dtype == "fp8" and "token" in case.layouts[:2]:
            why.append("per-token")
        if case.granularity == "int8":
            why.append("INT8")
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
        if case.granularity == "int8":
            why.append("INT8")
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


INT8_SHARE = {"reference": 0.15, "triton": 0.15, "ptx": 0.05, "gfx950_emulator": 0.05}   # of FP8 cases


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
    from ...spec.rules import P_RULES, REF_RULES
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    prof = PROFILES[profile]
    gpu = profile == "gpu"
    rng = random.Random(f"{path}:{profile}:{seed}")
    if path == "gfx950_emulator":
        dtype = "fp8"
    elif path == "ptx":
        dtype = _weighted(rng, ("fp8", "bf16", "fp16"), (0.7, 0.2, 0.1))
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
    # the INT8 Q.K^T mode, from a stream of its own so the other draws stay as they were
    if dtype == "fp8" and random.Random(f"{path}:{profile}:{seed}:int8").random() < INT8_SHARE.get(path, 0.0):
        gran, layouts = "int8", ("token", "token", "b_hkv")       # block_size: k's key block
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
    from ...quantize import FP8Inputs
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
    from ... import quantize_fp8, quantize_int8_qk
    from ...activations import make
    src = torch.bfloat16 if case.dtype == "fp8" else DTYPES[case.dtype]
    q, k, v = make(case.input, case.B, case.Sq, case.Hq, case.Hkv, case.D, case.Dv, seqlen_k=case.Sk,
                   seed=case.input_seed, dtype=src, device=device)
    kw = dict(q=q, k=k, v=v)
    if case.granularity == "int8":
        kw = quantize_int8_qk(q, k, v, key_block=case.block_size).kwargs()
    elif case.dtype == "fp8":
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
