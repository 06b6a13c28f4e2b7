"""Benchmark shapes and their FLOP counts."""
from __future__ import annotations

import dataclasses
import functools

from ..spec.shapes import HEAD_DIMS

SWEEP_SEQLENS = (1024, 2048, 4096, 8192, 16384, 32768)
SWEEP_TOKENS = 32768
SWEEP_HIDDEN = 2048                       # heads = 2048 / head_dim, FlashAttention's sweep
SWEEP_DIMS = HEAD_DIMS                    # every head dim pair the API takes


@dataclasses.dataclass(frozen=True)
class Case:
    group: str          # "sweep", "models", "quick", "capture"
    name: str
    B: int
    Sq: int
    Sk: int
    Hq: int
    Hkv: int
    D: int
    Dv: int
    causal: bool = True
    input: str = "realistic"
    softmax_scale: float | None = None
    lengths: tuple[int, ...] | None = None    # a packed (varlen) batch: each sequence's tokens
    # a mixed batch: each sequence's queries, the last of its ``lengths`` keys (a decode step's
    # 1..16, a prefill chunk's more); None: as many queries as keys
    q_lengths: tuple[int, ...] | None = None
    window: tuple[int, int] = (-1, -1)        # window_size (left, right), as FlashAttention takes it

    @property
    def query_lengths(self) -> tuple[int, ...] | None:
        """A packed batch's queries a sequence."""
        return self.q_lengths or self.lengths

    @property
    def decode(self) -> bool:
        """A decode step: Sq new queries a sequence over a KV cache of Sk keys."""
        return self.group == "decode"

    def kv_bytes(self, element_size: int) -> int:
        """Bytes of K and V a call reads, the numerator of a decode case's GB/s."""
        return self.B * self.Sk * self.Hkv * (self.D + self.Dv) * element_size

    @property
    def flops(self) -> float:
        if self.lengths:
            return sum(attention_flops(1, self.Hq, m, n, self.D, self.Dv, self.causal, self.window)
                       for m, n in zip(self.query_lengths, self.lengths))
        return attention_flops(self.B, self.Hq, self.Sq, self.Sk, self.D, self.Dv, self.causal, self.window)


def attention_flops(B, H, Sq, Sk, Dqk, Dv, causal, window=(-1, -1)) -> float:
    """2·B·H·(pairs)·(Dqk + Dv), pairs counted exactly: with bottom-right causal alignment
    query i sees i + 1 + Sk − Sq keys (Sq·Sk/2 ≈ FlashAttention's convention when Sq = Sk); a
    sliding window counts the keys each row sees (zyfa.spec.reference.key_limits)."""
    if tuple(window) != (-1, -1):
        from zyfa.spec.reference import key_limits
        first, last = key_limits(Sq, Sk, causal, tuple(window))
        pairs = float((last - first + 1).clamp(min=0).sum())
    elif causal:
        pairs = Sq * (Sk - Sq) + Sq * (Sq + 1) / 2
    else:
        pairs = Sq * Sk
    return 2.0 * B * H * pairs * (Dqk + Dv)


def sweep_cases(dims=SWEEP_DIMS, seqlens=SWEEP_SEQLENS) -> list[Case]:
    out = []
    for D, Dv in dims:
        H = 16 if D == 192 else SWEEP_HIDDEN // D
        for S in seqlens:
            B = max(1, SWEEP_TOKENS // S)
            out.append(Case("sweep", f"d{D}/{Dv} {S // 1024}K", B, S, S, H, H, D, Dv))
    return out


def model_cases() -> list[Case]:
    """The shapes ZYFA reports at 16K, 32K Gaussian, and the issues' headline shapes: d128 with
    32 heads at 32K on realistic activations, and batch 4 at 4K."""
    return [
        Case("models", "Mistral-7B 16K", 1, 16384, 16384, 32, 8, 128, 128),
        Case("models", "Qwen3-8B 16K", 1, 16384, 16384, 32, 8, 128, 128),
        Case("models", "DeepSeek-V2-Lite 16K", 1, 16384, 16384, 16, 16, 192, 128),
        Case("models", "32K Gaussian d128", 1, 32768, 32768, 32, 32, 128, 128, input="gaussian"),
        Case("models", "d128 32 heads 32K", 1, 32768, 32768, 32, 32, 128, 128),
        Case("models", "d128 batch 4 4K", 4, 4096, 4096, 32, 32, 128, 128),
    ]


def quick_cases() -> list[Case]:
    """A subset that runs in under a minute (49 s on an H200 with every anchor)."""
    return [Case("quick", "Mistral-7B 8K", 1, 8192, 8192, 32, 8, 128, 128),
            Case("quick", "d128 4K", 8, 4096, 4096, 16, 16, 128, 128, input="gaussian")]


# 16 sequences of 512 to 16K tokens, 64K in all, two of odd length, the longest last (its last
# rows are where the error is measured)
VARLEN_LENGTHS = (512, 8192, 1024, 6144, 2048, 4096, 3072, 1536, 5120, 768, 7168, 2560, 3584, 1279, 2049, 16384)


def varlen_cases() -> list[Case]:
    """What varlen costs, beside what it costs FA3: four 16K sequences packed (FlashAttention's
    varlen layout) against the same four as a dense batch, equal shapes, so the two ratios to
    FA3 differ only by the packed path; and the serving batch of VARLEN_LENGTHS packed, where
    short sequences (and how the kernel balances them) also count."""
    n = len(VARLEN_LENGTHS)
    return [Case("varlen", "varlen 16 seqs 64K GQA 32/8", n, max(VARLEN_LENGTHS), max(VARLEN_LENGTHS), 32, 8, 128,
                 128, lengths=VARLEN_LENGTHS),
            Case("varlen", "varlen 4 x 16K GQA 32/8", 4, 16384, 16384, 32, 8, 128, 128, lengths=(16384,) * 4),
            Case("varlen", "dense 4 x 16K GQA 32/8", 4, 16384, 16384, 32, 8, 128, 128)]


def frontier_cases() -> list[Case]:
    """The accuracy-speed frontier: the realistic model shapes and one case a head dim the models
    lack (d64, d256; 8K, batch 4, FlashAttention's 2048-wide sweep heads), where every FP8 / INT8
    mode and anchor is timed and its end-to-end error taken."""
    models = [dataclasses.replace(c, group="frontier") for c in model_cases() if c.input == "realistic"]
    return models + [Case("frontier", "d64 batch 4 8K", 4, 8192, 8192, 32, 32, 64, 64),
                     Case("frontier", "d256 batch 4 8K", 4, 8192, 8192, 8, 8, 256, 256)]


def decode_cases() -> list[Case]:
    """One query a sequence over a cache, GQA 32/8 d128: many short caches, the middle, few long."""
    return [Case("decode", f"decode {b} x {s // 1024}K GQA 32/8", b, 1, s, 32, 8, 128, 128)
            for b, s in ((32, 8192), (128, 2048), (8, 32768))]


# what a serving engine's step issues: 16 one-token decodes over 8K keys and two 4K prefill chunks
MIXED_QUERIES = (1,) * 16 + (4096, 4096)
MIXED_KEYS = (8192,) * 16 + (4096, 4096)


def mixed_cases() -> list[Case]:
    """A mixed varlen batch (decodes and prefill chunks in one flash_attn_varlen_func call,
    causal), GQA 32/8 d128: zyfa's one call beside the same work as separate calls (the decode
    kernel, then the prefill call) and FA3's varlen call."""
    return [Case("mixed", "mixed 16 decodes x 8K + 2 x 4K prefill GQA 32/8", len(MIXED_KEYS), max(MIXED_QUERIES),
                 max(MIXED_KEYS), 32, 8, 128, 128, lengths=MIXED_KEYS, q_lengths=MIXED_QUERIES)]


def window_cases() -> list[Case]:
    """Sliding-window attention as Mistral-7B's layers run it at long context: a window of 4096
    keys (FlashAttention's window_size (4096, 0), causal) over 32K tokens, GQA 32/8, d128. zyfa
    skips the key blocks outside the window; FA3 with the same window_size is the anchor."""
    return [Case("window", "sliding window 4096 over 32K GQA 32/8", 1, 32768, 32768, 32, 8, 128, 128,
                 window=(4096, 0))]


def cases_for(names: str) -> list[Case]:
    """Case groups by name: quick, sweep, models, varlen, frontier, decode (with the mixed batch),
    mixed, window, all, or one head dim of the sweep (sweep-d128)."""
    table = {"sweep": sweep_cases, "models": model_cases, "quick": quick_cases, "varlen": varlen_cases,
             "frontier": frontier_cases, "decode": lambda: decode_cases() + mixed_cases(), "mixed": mixed_cases,
             "window": window_cases}
    for d, dv in SWEEP_DIMS:
        table[f"sweep-d{d}"] = functools.partial(sweep_cases, dims=((d, dv),))
    out = []
    for n in names.split(","):
        if n == "all":
            out += sweep_cases() + model_cases()
        elif n in table:
            out += table[n]()
        else:
            raise ValueError(f"--cases takes a comma-separated list of {sorted(table) + ['all']}, got {n!r}")
    return out
