"""Mixed varlen batches: prefill chunks and decode sequences (1-16 queries) in one
flash_attn_varlen_func call, as vLLM and SGLang issue them.

The decode sequences run on the Triton decode kernel (zyfa.triton_kernels.decode: a GQA group's
query heads in one tile, keys split over programs), the rest in the one prefill launch the call
would make anyway. That launch writes the packed output, so that no prefill row is copied: a
kernel that lists its tiles (the generated Hopper kernel's packed launches) leaves the decode
sequences' tiles out, others run each decode sequence on only its first keys (as many as it has
queries: a tile of no real work), and the decode kernel then writes those rows in place
(their output and LSE), through views where the decode sequences lie together with equal
query counts, else through a gathered q and a scatter of their (few) rows. Packed keys are read
by the decode kernel as one cache row that every sequence shares, each sequence's keys
[start, start + len) of it (the left-pad path); a paged cache through the rows of the block
table that the decode sequences use.

Taken (``plan``) with backend auto or triton where the decode kernel can run the batch's decode
part (the decode backend's head dims), no sliding window, 16-bit inputs, or E4M3
under the rules the decode kernel's FP8 dots compute (p_rule exact, ref_rule running) with V
stored key-major; ``explain_varlen`` says which kernel each part runs and why.
"""
from __future__ import annotations

import dataclasses

import torch

from . import dispatch
from .batch_lengths import key_lengths, lengths
from .decode import BACKENDS as DECODE_BACKENDS
from .decode_checks import MAX_QUERIES as MAX_DECODE_QUERIES
from .device import device_arch, host_table, to_device
from .spec.shapes import cu_seqlens, page_rows
from .validation import check_window, fp8_rules


@dataclasses.dataclass(frozen=True)
class MixedPlan:
    decode: tuple[int, ...]          # sequences the decode kernel runs
    prefill: tuple[int, ...]         # sequences the prefill launch runs (with queries)
    why: str                         # why the decode sequences are, or are not, routed

    @property
    def routed(self) -> bool:
        return bool(self.decode)


def plan(q, v, q_lens, k_lens, window, backend, is_fp8, p_rule, ref_rule) -> MixedPlan:
    """Which sequences go to the decode kernel: every one with 1..MAX_DECODE_QUERIES queries,
    where the decode kernel can take the call (else none, and ``why`` says what stops it)."""
    decode = tuple(i for i, n in enumerate(q_lens) if 1 <= n <= MAX_DECODE_QUERIES)
    prefill = tuple(i for i, n in enumerate(q_lens) if n > MAX_DECODE_QUERIES)
    reason = None
    if not decode:
        reason = f"no sequence has 1..{MAX_DECODE_QUERIES} queries"
    elif backend not in ("auto", "triton"):
        reason = f"backend {backend!r} (the decode kernel runs under auto or triton)"
    elif window != (-1, -1):
        reason = "a sliding window (the decode kernel has none)"
    elif q.dtype == torch.int8:
        reason = "INT8 Q.K^T (the decode kernel takes E4M3 or 16-bit q)"
    elif is_fp8:
        # measured: the FP8 prefill launch takes the one-query rows faster than a decode launch
        # beside it, from contiguous keys and from a paged cache alike (docs/decisions.md)
        reason = "FP8 (one prefill launch runs its decode rows fastest)"
    elif v.stride(-1) != 1:
        reason = "V stored transposed (the decode kernel reads V key-major)"
    else:
        ok, why = _decoder().can_implement(_decode_problem(q, v, is_fp8, q_lens, decode))
        if not ok:
            reason = f"the decode kernel cannot run here: {why}"
    if reason is not None:
        return MixedPlan((), tuple(i for i, n in enumerate(q_lens) if n), f"decode sequences not routed: {reason}")
    return MixedPlan(decode, prefill, f"{len(decode)} sequence(s) of 1..{MAX_DECODE_QUERIES} queries on the Triton "
                                      f"decode kernel, {len(prefill)} on the prefill launch")


def _decoder() -> dispatch.Backend:
    """The decode backend a mixed batch's decode sequences run on."""
    return dispatch.by_name("triton", DECODE_BACKENDS)


def _decode_problem(q, v, is_fp8, q_lens, decode):
    return dispatch.DecodeProblem(device=q.device, arch=device_arch(q.device), is_fp8=is_fp8,
                                  head_dims=(q.shape[-1], v.shape[-1]), seqlen_q=max(q_lens[i] for i in decode),
                                  paged=False)


def run_decodes(mixed: MixedPlan, out, lse, q, k, v, q_lens, k_lens, where, softmax_scale, causal, descales,
                block_table) -> None:
    """Overwrite the decode sequences' rows of the packed out (total_q, Hq, Dv) and lse (Hq,
    total_q) with the decode kernel's: one launch (and its merge) over all of them."""
    dec = list(mixed.decode)
    dev = q.device
    starts = cu_seqlens(q_lens)
    sq = max(q_lens[i] for i in dec)
    together = all(q_lens[i] == sq for i in dec) and all(starts[b] == starts[a + 1] for a, b in zip(dec, dec[1:]))
    first, rows = starts[dec[0]], len(dec) * sq
    if together:
        q_dec = q[first:first + rows].view(len(dec), sq, *q.shape[1:])
    else:
        # each sequence's queries last in its sq rows (padding first keeps the causal offsets)
        idx = torch.tensor([starts[i] + j - (sq - q_lens[i]) if j >= sq - q_lens[i] else -1
                            for i in dec for j in range(sq)], dtype=torch.long)
        real = idx >= 0
        keep, dst = to_device(real, dev, torch.bool), to_device(idx[real], dev, torch.long)   # gather and scatter
        q_dec = torch.zeros(len(dec) * sq, *q.shape[1:], dtype=q.dtype, device=dev)
        q_dec[keep] = q.index_select(0, dst)
        q_dec = q_dec.view(len(dec), sq, *q.shape[1:])
    lens = [k_lens[i] for i in dec]
    if block_table is None:
        cache_k = k.unsqueeze(0).expand(len(dec), *k.shape)
        cache_v = v.unsqueeze(0).expand(len(dec), *v.shape)
        left = [where[i] for i in dec]
        seqlens, leftpad = host_table([[s + n for s, n in zip(left, lens)], left], dev)     # one copy, kept
        table = None
    else:
        cache_k, cache_v = k, v
        table = to_device(page_rows([where[i] for i in dec]), dev)
        seqlens, leftpad = to_device(lens, dev), None
    ds = dict(descales)
    per_sequence = [n for n, d in descales.items() if d is not None and d.dim() == 2]
    if per_sequence:                                   # (batch, kv_heads) descales: the decode sequences' rows
        sel = to_device(dec, dev, torch.long)
        ds.update({n: descales[n].index_select(0, sel.to(descales[n].device)) for n in per_sequence})
    o_view = out[first:first + rows].view(len(dec), sq, *out.shape[1:]) if together else None
    o_dec, lse_dec = _decoder().run(q_dec, cache_k, cache_v, seqlens, table, softmax_scale=softmax_scale, causal=causal,
                                    cache_leftpad=leftpad, out=o_view, **ds)
    if together:
        lse[:, first:first + rows] = lse_dec.permute(1, 0, 2).reshape(lse.shape[0], rows)
        return
    out.index_copy_(0, dst, o_dec.reshape(-1, *out.shape[1:])[keep])
    lse.index_copy_(1, dst, lse_dec.permute(1, 0, 2).reshape(lse.shape[0], -1)[:, keep])


def explain_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k=None, seqused_k=None, causal=False, window_size=(-1, -1),
                   block_table=None, backend="auto", p_rule=None, ref_rule=None) -> str:
    """Which kernel each part of a flash_attn_varlen_func call runs: the decode sequences
    (1..16 queries) and the rest. The lengths are read (and checked) as the call reads them."""
    q_lens = lengths("cu_seqlens_q", cu_seqlens_q, q.shape[0], "total tokens of q (q.shape[0])")
    k_lens, _ = key_lengths(k, cu_seqlens_k, block_table, seqused_k, len(q_lens))
    is_fp8 = v.dtype == torch.float8_e4m3fn
    p_rule, ref_rule = fp8_rules(is_fp8, p_rule, ref_rule, q.dtype)
    _, window = check_window(window_size, causal)
    mixed = plan(q, v, q_lens, k_lens, window, backend, is_fp8, p_rule, ref_rule)
    lines = [f"mixed batch: {mixed.why}"]
    if mixed.routed:
        lines.append(f"  decode  sequences {list(mixed.decode)}: Triton decode kernel")
    rest = list(mixed.prefill)
    if rest:
        lines.append(f"  prefill sequences {rest}: one packed launch (the backend chosen for the longest, "
                     f"{max(q_lens[i] for i in rest)} queries, {max(k_lens[i] for i in rest)} keys)")
    return "\n".join(lines)
