"""What `zyfa bench` times: every zyfa path and the anchors, as small frozen records.

A method's ``applies(case)`` says whether a case is of the kind it takes, ``missing()`` why it
cannot run on this machine at all (None when it can), ``unsupported(case)`` why not on a case it
takes; ``build(inputs)``
prepares it for one case and returns a call giving (out, lse or None), or (call, finish)
when the call's raw result needs converting (outside the timing) by finish(result).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

import torch

import zyfa
from zyfa.spec.rules import P_RULES
from zyfa.quantize import FP8Inputs, quantize_fp8, quantize_int8_qk
from zyfa.spec.reference import attention_fp64

from .anchors import (cudnn_fe_missing, cudnn_fp8_build, fa3_build, fa3_missing, fa3_varlen_build, gpu_missing,
                      no_window, sage_build, sage_missing, sage_unsupported, sdpa_build)
from .cases import Case


class Inputs:
    """One case's BF16 inputs and, made on first use, their FP8 quantizations and references."""

    def __init__(self, case: Case, q, k, v):
        self.case, self.q, self.k, self.v = case, q, k, v
        self._fp8: dict[str, FP8Inputs] = {}
        self._refs: dict = {}

    @property
    def scale(self) -> float:
        return self.case.softmax_scale or 1.0 / math.sqrt(self.case.D)

    def fp8(self, granularity: str) -> FP8Inputs:
        """The quantized inputs a method reads: quantize_fp8's at a granularity, or "int8qk"
        (quantize_int8_qk: int8 q and k, E4M3 v)."""
        if granularity not in self._fp8:
            self._fp8[granularity] = (quantize_int8_qk(self.q, self.k, self.v) if granularity == "int8qk" else
                                      quantize_fp8(self.q, self.k, self.v, granularity=granularity))
        return self._fp8[granularity]

    def ref_rows(self) -> slice:
        """Rows the error is measured on: all up to 4K queries, else the last 2K (they see every
        key); packed batches: those of the last sequence (packed rows of the batch-1 view)."""
        if self.case.lengths:
            total, last = sum(self.case.query_lengths), self.case.query_lengths[-1]
            return slice(total - min(last, 2048), total)
        return slice(0, self.case.Sq) if self.case.Sq <= 4096 else slice(self.case.Sq - 2048, self.case.Sq)

    def packed(self, lengths: tuple[int, ...] | None = None) -> tuple[torch.Tensor, int]:
        """int32 cu_seqlens on the inputs' device of a packed case's sequences (its keys; or
        ``lengths``, its queries say), and the longest."""
        cu = [0]
        for n in lengths or self.case.lengths:
            cu.append(cu[-1] + n)
        return torch.tensor(cu, dtype=torch.int32, device=self.q.device), max(lengths or self.case.lengths)

    def varlen_args(self, fp8: bool) -> dict:
        """flash_attn_varlen_func's arguments for a packed case (FP8: descales per sequence)."""
        cu, longest = self.packed()
        cu_q, longest_q = self.packed(self.case.query_lengths)
        n = len(self.case.lengths)
        if not fp8:
            q, k, v, ds = self.q[0], self.k[0], self.v[0], {}
        else:
            x = self.fp8("head")
            q, k, v = x.q[0], x.k[0], x.v[0]
            ds = {name: getattr(x, name).expand(n, -1).contiguous() for name in ("q_descale", "k_descale", "v_descale")}
        return dict(q=q, k=k, v=v, cu_seqlens_q=cu_q, cu_seqlens_k=cu, max_seqlen_q=longest_q, max_seqlen_k=longest,
                    **ds)

    def reference(self, quant: str | None):
        """float64 (out, lse) on the chosen rows: of the BF16 inputs (quant None) or of the
        dequantized FP8 inputs a method actually read (kernel-only error)."""
        if quant not in self._refs:
            self._refs[quant] = self._reference(quant)
        return self._refs[quant]

    def _reference(self, quant):
        if quant is None:
            q, k, v = self.q, self.k, self.v
        else:
            q, k, v = self.fp8(quant).dequantized()
        if self.case.lengths:             # the last sequence's own keys
            first = sum(self.case.lengths[:-1])
            k, v = k[:, first:], v[:, first:]
        return attention_fp64(q[:, self.ref_rows()], k, v, causal=self.case.causal, softmax_scale=self.scale,
                              return_lse=True, window_size=self.case.window)


@dataclasses.dataclass(frozen=True)
class Method:
    method: str                      # zyfa, fa3, cudnn, sdpa_flash, sdpa_cudnn
    backend: str                     # for zyfa: triton, ...; else the library
    dtype: str                       # fp8 / bf16
    quant: str | None                # FP8 scale granularity it reads (for kernel-only error)
    build: Callable[[Inputs], Callable[[], tuple]]
    missing: Callable[[], str | None]
    p_rule: str | None = None
    unsupported: Callable[[Case], str | None] = lambda case: None    # why a case is out of its reach
    with_quantize: bool = False      # the timed call quantizes the BF16 inputs too
    varlen: bool = False             # takes packed (varlen) cases only, through a varlen function
    page_size: int | None = None     # varlen, decode: the keys from a paged KV cache of pages this size
    ref_rule: str | None = None      # FP8: a reference rule other than the default (the fast mode: running)
    decode: bool = False             # takes decode cases only (flash_attn_with_kvcache, its anchors, a copy)
    mixed: bool = False              # takes mixed packed batches only (case.q_lengths: decodes beside prefill)

    def applies(self, case: Case) -> bool:
        """Whether ``case`` is of the kind this method takes (packed, mixed, decode or dense
        prefill): on another kind it is not a method that could have run, so it gets no record."""
        return (self.varlen == bool(case.lengths) and self.decode == case.decode
                and (not self.mixed or case.q_lengths is not None))

    @property
    def label(self) -> str:
        rule = (f"-{self.p_rule}" if self.p_rule else "") + (f"-{self.ref_rule}" if self.ref_rule else "")
        path = f"-{self.backend}" if self.method == "zyfa" and self.backend != "triton" else ""
        paged = f"-paged{self.page_size}" if self.page_size else ""
        kind = "-varlen" if self.varlen else "-decode" if self.decode and self.method != "copy" else ""
        return (f"{self.method}{path}{kind}{paged}-{self.dtype}{rule}"
                f"{'+quantize' if self.with_quantize else ''}")


# ------------------------------------------------------------------ zyfa
def zyfa_missing(backend):
    """Whether zyfa's kernels have a device here: a GPU, or Triton's interpreter on the CPU."""
    def missing():
        if not torch.cuda.is_available():
            from zyfa.device import interpreter_active
            if not interpreter_active():
                return "no CUDA GPU (and the Triton interpreter is off)"
        return None
    return missing


def _zyfa_unsupported(backend: str, is_fp8: bool, p_rule: str | None, int8_qk: bool = False,
                      ref_rule: str | None = None):
    """Why the backend cannot run a case on this machine: the backend's own supports()
    (``int8_qk``: quantize_int8_qk's inputs, q per token and k a block of 128 keys)."""
    def unsupported(case: Case):
        from zyfa import dispatch
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        problem = dispatch.problem(device, (case.D, case.Dv), case.Sq, case.Sk, causal=case.causal, is_fp8=is_fp8,
                                   p_rule=p_rule, ref_rule=ref_rule, int8_qk=int8_qk, per_token_descales=int8_qk,
                                   window=case.window)
        if backend == "auto":
            try:
                dispatch.select(problem)
            except (RuntimeError, ValueError) as e:
                return str(e)
            return None
        ok, why = dispatch.by_name(backend).can_implement(problem)
        return None if ok else why
    return unsupported


def _zyfa_fp8(rule, backend, quant="head", ref_rule=None):
    def build(inp: Inputs):
        x = inp.fp8(quant)
        return lambda: zyfa.flash_attn_func(**x.kwargs(), softmax_scale=inp.scale, causal=inp.case.causal,
                                            window_size=inp.case.window, p_rule=rule, ref_rule=ref_rule,
                                            return_lse=True, backend=backend)
    return build


def _zyfa_quantize(quantizer, ref_rule=None):
    """What a user with BF16 activations runs: ``quantizer``'s default (quantize_fp8 or
    quantize_int8_qk), then the default path (or the mode ``ref_rule`` names), both in the
    timed call."""
    def build(inp: Inputs):
        def call():
            x = quantizer(inp.q, inp.k, inp.v)
            return zyfa.flash_attn_func(**x.kwargs(), softmax_scale=inp.scale, causal=inp.case.causal,
                                        window_size=inp.case.window, ref_rule=ref_rule, return_lse=True)
        return call
    return build


def _zyfa_varlen(dtype: str, page_size: int | None = None, **rules):
    """zyfa's varlen call as its docs advise: the index tensors on the host (zyfa reads the
    lengths there; device ones would cost a synchronization a call); ``rules``: FP8's p_rule
    and ref_rule (the fast mode), else the defaults."""
    def build(inp: Inputs):
        a = inp.varlen_args(dtype == "fp8")
        if page_size:               # the same keys from a shuffled paged cache
            k, v, table, used = zyfa.varlen.paged_kv_cache(a["k"], a["v"], a["cu_seqlens_k"], page_size)
            a.update(k=k, v=v, block_table=table, seqused_k=used, cu_seqlens_k=None)
        a.update({name: a[name].cpu() for name in ("cu_seqlens_q", "cu_seqlens_k", "block_table", "seqused_k")
                  if a.get(name) is not None})

        def call():
            out, lse = zyfa.flash_attn_varlen_func(**a, softmax_scale=inp.scale, causal=inp.case.causal,
                                                   window_size=inp.case.window, return_lse=True, **rules)
            return out[None], lse[None]
        return call
    return build


def _zyfa_bf16(backend):
    def build(inp: Inputs):
        return lambda: zyfa.flash_attn_func(inp.q, inp.k, inp.v, softmax_scale=inp.scale, causal=inp.case.causal,
                                            window_size=inp.case.window, return_lse=True, backend=backend)
    return build


def prefill_methods(backend: str = "triton") -> list[Method]:
    """Every method of the prefill cases (run.all_methods adds the decode ones)."""
    zm = zyfa_missing(backend)
    out = [Method("zyfa", backend, "fp8", "head", _zyfa_fp8(r, backend), zm, p_rule=r,
                  unsupported=_zyfa_unsupported(backend, True, r)) for r in P_RULES]
    out.append(Method("zyfa", backend, "bf16", None, _zyfa_bf16(backend), zm,
                      unsupported=_zyfa_unsupported(backend, False, None)))
    out += [Method("zyfa", "ptx", "fp8", "head", _zyfa_fp8(r, "ptx"), gpu_missing, p_rule=r,
                   unsupported=_zyfa_unsupported("ptx", True, r)) for r in P_RULES]
    # the fast mode: the running-max reference (label zyfa-ptx-fp8-exact-running)
    out.append(Method("zyfa", "ptx", "fp8", "head", _zyfa_fp8("exact", "ptx", ref_rule="running"), gpu_missing,
                      p_rule="exact", ref_rule="running",
                      unsupported=_zyfa_unsupported("ptx", True, "exact", ref_rule="running")))
    # BF16: the generated kernel, and the default path (the dispatcher's choice per shape)
    out += [Method("zyfa", b, "bf16", None, _zyfa_bf16(b), gpu_missing if b == "ptx" else zm,
                   unsupported=_zyfa_unsupported(b, False, None)) for b in ("ptx", "auto")]
    # INT8 Q.K^T (E4M3 P.V): the Triton kernel and the generated one; labels zyfa-int8qk,
    # zyfa-ptx-int8qk, zyfa-int8qk+quantize (below)
    out.append(Method("zyfa", "triton", "int8qk", "int8qk", _zyfa_fp8(None, "triton", "int8qk"), zm,
                      unsupported=_zyfa_unsupported("triton", True, None, int8_qk=True)))
    out.append(Method("zyfa", "ptx", "int8qk", "int8qk", _zyfa_fp8(None, "ptx", "int8qk"), gpu_missing,
                      unsupported=_zyfa_unsupported("ptx", True, None, int8_qk=True)))
    out.append(Method("zyfa", "auto", "fp8", "head", _zyfa_quantize(quantize_fp8), zm, with_quantize=True,
                      unsupported=_zyfa_unsupported("auto", True, None)))
    out.append(Method("zyfa", "auto", "fp8", "head", _zyfa_quantize(quantize_fp8, "running"), zm, with_quantize=True,
                      ref_rule="running", unsupported=_zyfa_unsupported("auto", True, None, ref_rule="running")))
    out.append(Method("zyfa", "triton", "int8qk", "int8qk", _zyfa_quantize(quantize_int8_qk), zm, with_quantize=True,
                      unsupported=_zyfa_unsupported("triton", True, None, int8_qk=True)))
    out += [Method("zyfa", "auto", dtype, "head" if dtype == "fp8" else None, _zyfa_varlen(dtype, page), zm,
                   varlen=True, page_size=page) for page in (None, 64, 128) for dtype in ("fp8", "bf16")]
    # the fast mode's packed call (label zyfa-auto-varlen-fp8-exact-running)
    out.append(Method("zyfa", "auto", "fp8", "head", _zyfa_varlen("fp8", p_rule="exact", ref_rule="running"), zm,
                      varlen=True, p_rule="exact", ref_rule="running"))
    out += [Method("fa3", "fa3", "fp8", "head", fa3_varlen_build("fp8"), fa3_missing, varlen=True),
            Method("fa3", "fa3", "bf16", None, fa3_varlen_build("bf16"), fa3_missing, varlen=True)]
    out += [Method("fa3", "fa3", "fp8", "head", fa3_build("fp8"), fa3_missing),
            Method("fa3", "fa3", "bf16", None, fa3_build("bf16"), fa3_missing),
            Method("cudnn", "cudnn", "fp8", "tensor", cudnn_fp8_build, cudnn_fe_missing, unsupported=no_window),
            Method("sdpa_cudnn", "sdpa", "bf16", None, sdpa_build("sdpa_cudnn"), gpu_missing,
                   unsupported=no_window),
            Method("sdpa_flash", "sdpa", "bf16", None, sdpa_build("sdpa_flash"), gpu_missing,
                   unsupported=no_window),
            Method("sageattention", "sage", "int8", None, sage_build, sage_missing, unsupported=sage_unsupported,
                   with_quantize=True)]
    return out
