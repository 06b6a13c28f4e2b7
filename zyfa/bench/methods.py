"""What `zyfa bench` times: every zyfa path and the anchors, as small frozen records.

A method's ``missing()`` says why it cannot run here (None when it can); ``build(inputs)``
prepares it for one case and returns a call giving (out, lse or None), or (call, finish)
when the call's raw result needs converting (outside the timing) by finish(result).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

import torch

import zyfa
from zyfa.spec.rules import DEFAULT_P_RULE, DEFAULT_REF_RULE, P_RULES
from zyfa.quantize import FP8Inputs, quantize_fp8, quantize_int8_qk
from zyfa.spec.reference import attention_fp64

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
            total, last = sum(self.case.lengths), self.case.lengths[-1]
            return slice(total - min(last, 2048), total)
        return slice(0, self.case.Sq) if self.case.Sq <= 4096 else slice(self.case.Sq - 2048, self.case.Sq)

    def packed(self) -> tuple[torch.Tensor, int]:
        """A packed case's int32 cu_seqlens on the inputs' device, and its longest sequence."""
        cu = [0]
        for n in self.case.lengths:
            cu.append(cu[-1] + n)
        return torch.tensor(cu, dtype=torch.int32, device=self.q.device), max(self.case.lengths)

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

    @property
    def label(self) -> str:
        rule = (f"-{self.p_rule}" if self.p_rule else "") + (f"-{self.ref_rule}" if self.ref_rule else "")
        path = f"-{self.backend}" if self.method == "zyfa" and self.backend != "triton" else ""
        paged = f"-paged{self.page_size}" if self.page_size else ""
        kind = "-varlen" if self.varlen else "-decode" if self.decode and self.method != "copy" else ""
        return (f"{self.method}{path}{kind}{paged}-{self.dtype}{rule}"
                f"{'+quantize' if self.with_quantize else ''}")


# ------------------------------------------------------------------ zyfa
def _zyfa_missing(backend):
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
        from zyfa.device import device_arch
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        problem = dispatch.Problem(device=device, arch=device_arch(device), is_fp8=is_fp8,
                                   head_dims=(case.D, case.Dv), causal=case.causal, seqlen_q=case.Sq,
                                   seqlen_k=case.Sk, p_rule=p_rule or DEFAULT_P_RULE,
                                   ref_rule=ref_rule or DEFAULT_REF_RULE,
                                   int8_qk=int8_qk, per_token_descales=int8_qk, window=case.window)
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


def _varlen_args(inp: Inputs, fp8: bool) -> dict:
    """flash_attn_varlen_func's arguments for a packed case (FP8: descales per sequence)."""
    cu, longest = inp.packed()
    n = len(inp.case.lengths)
    if not fp8:
        q, k, v, ds = inp.q[0], inp.k[0], inp.v[0], {}
    else:
        x = inp.fp8("head")
        q, k, v = x.q[0], x.k[0], x.v[0]
        ds = {name: getattr(x, name).expand(n, -1).contiguous() for name in ("q_descale", "k_descale", "v_descale")}
    return dict(q=q, k=k, v=v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=longest, max_seqlen_k=longest, **ds)


def _zyfa_varlen(dtype: str, page_size: int | None = None):
    """zyfa's varlen call as its docs advise: the index tensors on the host (zyfa reads the
    lengths there; device ones would cost a synchronization a call)."""
    def build(inp: Inputs):
        a = _varlen_args(inp, dtype == "fp8")
        if page_size:               # the same keys from a shuffled paged cache
            k, v, table, used = zyfa.varlen.paged_kv_cache(a["k"], a["v"], a["cu_seqlens_k"], page_size)
            a.update(k=k, v=v, block_table=table, seqused_k=used, cu_seqlens_k=None)
        a.update({name: a[name].cpu() for name in ("cu_seqlens_q", "cu_seqlens_k", "block_table", "seqused_k")
                  if a.get(name) is not None})

        def call():
            out, lse = zyfa.flash_attn_varlen_func(**a, softmax_scale=inp.scale, causal=inp.case.causal,
                                                   window_size=inp.case.window, return_lse=True)
            return out[None], lse[None]
        return call
    return build


def _zyfa_bf16(backend):
    def build(inp: Inputs):
        return lambda: zyfa.flash_attn_func(inp.q, inp.k, inp.v, softmax_scale=inp.scale, causal=inp.case.causal,
                                            window_size=inp.case.window, return_lse=True, backend=backend)
    return build


# ------------------------------------------------------------------ FlashAttention-3 (fa3-fwd wheel)
def _fa3(varlen: bool = False):
    import fa3_fwd_interface
    return fa3_fwd_interface.flash_attn_varlen_func if varlen else fa3_fwd_interface.flash_attn_func


def unimportable(load: Callable[[], object], what: str) -> Callable[[], str | None]:
    """A method's missing(): why ``load`` (an anchor's import) fails here, or None."""
    def missing():
        try:
            load()
        except Exception as e:  # noqa: BLE001  (any import failure means the anchor is missing)
            return f"{what} not importable: {type(e).__name__}: {e}"
        return None
    return missing


_fa3_missing = unimportable(_fa3, "FlashAttention-3 (pip install fa3-fwd)")


def _split(res):
    """FA3 returns out or (out, lse, ...)."""
    return (res[0], res[1]) if isinstance(res, tuple) else (res, None)


def _fa3_build(dtype):
    def build(inp: Inputs):
        fa, c = _fa3(), inp.case
        if dtype == "bf16":
            return lambda: _split(fa(inp.q, inp.k, inp.v, softmax_scale=inp.scale, causal=c.causal,
                                     window_size=c.window))
        x = inp.fp8("head")
        v = x.v.contiguous()           # FA3 reads V in the normal layout
        return lambda: _split(fa(x.q, x.k, v, softmax_scale=inp.scale, causal=c.causal, q_descale=x.q_descale,
                                 k_descale=x.k_descale, v_descale=x.v_descale, window_size=c.window))
    return build


# ------------------------------------------------------------------ cuDNN
def _fa3_varlen_build(dtype):
    def build(inp: Inputs):
        fa, a = _fa3(varlen=True), _varlen_args(inp, dtype == "fp8")
        if dtype == "fp8":
            a["v"] = a["v"].contiguous()          # FA3 reads V in the normal layout

        def call():
            out, lse = _split(fa(**a, softmax_scale=inp.scale, causal=inp.case.causal, window_size=inp.case.window))
            return out[None], None if lse is None else lse[None]
        return call
    return build


def _cudnn_fe_missing():
    if not torch.cuda.is_available():
        return "no CUDA GPU"
    try:
        import cudnn  # noqa: F401
    except Exception as e:  # noqa: BLE001
        return f"cuDNN frontend not importable (pip install nvidia-cudnn-frontend): {type(e).__name__}: {e}"
    return None


def _bhsd(graph, name, x, dtype):
    """A cuDNN tensor (b, h, s, d) over a (B, S, H, D) torch tensor, without copying."""
    B, S, H, D = x.shape
    return graph.tensor(name=name, dim=[B, H, S, D], stride=[x.stride(0), x.stride(2), x.stride(1), x.stride(3)],
                        data_type=dtype)


def _cudnn_fp8_build(inp: Inputs):
    """cuDNN's FP8 SDPA (per-tensor scales; on Hopper its output is FP8, scaled like V)."""
    import cudnn
    c = inp.case
    if c.causal and c.Sq != c.Sk:
        raise ValueError("cuDNN's causal mask is top-left aligned; only Sq == Sk is compared")
    x = inp.fp8("tensor")
    q, k, v = x.q, x.k, x.v.contiguous()
    dev = q.device
    E4M3, F32 = cudnn.data_type.FP8_E4M3, cudnn.data_type.FLOAT
    handle = cudnn.create_handle()
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream(dev).cuda_stream)
    g = cudnn.pygraph(io_data_type=E4M3, intermediate_data_type=F32, compute_data_type=F32, handle=handle)
    tq, tk, tv = (_bhsd(g, n, t, E4M3) for n, t in (("q", q), ("k", k), ("v", v)))
    one = dict(dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=F32)
    names = ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")
    scal = {n: g.tensor(name=n, **one) for n in names}
    p_max = 448.0                                  # P in [0, 1] stored as E4M3 times 448
    values = dict(descale_q=x.q_descale, descale_k=x.k_descale, descale_v=x.v_descale,
                  descale_s=torch.tensor(1 / p_max), scale_s=torch.tensor(p_max), scale_o=1 / x.v_descale)
    values = {n: t.reshape(1, 1, 1, 1).float().to(dev) for n, t in values.items()}
    kw = dict(q=tq, k=tk, v=tv, **scal, attn_scale=inp.scale, use_causal_mask=c.causal, name="sdpa_fp8")
    try:
        o_t, _stats, amax_s, amax_o = g.sdpa_fp8(**kw, generate_stats=False)
    except TypeError:                              # frontends before generate_stats took is_inference
        o_t, _stats, amax_s, amax_o = g.sdpa_fp8(**kw, is_inference=True)
    out = torch.empty(c.B, c.Sq, c.Hq, c.Dv, dtype=torch.float8_e4m3fn, device=dev)
    o_t.set_output(True).set_dim([c.B, c.Hq, c.Sq, c.Dv]).set_stride(
        [out.stride(0), out.stride(2), out.stride(1), out.stride(3)]).set_data_type(E4M3)
    for t in (amax_s, amax_o):         # not outputs: computing them costs time the anchor need not spend
        t.set_output(False).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(F32)
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    ws = torch.empty(g.get_workspace_size(), dtype=torch.uint8, device=dev)
    pack = {tq: q, tk: k, tv: v, o_t: out}
    pack.update({scal[n]: values[n] for n in names})
    descale_o = x.v_descale.float().to(dev)

    def call():
        g.execute(pack, ws, handle=handle)
        return out, None

    def finish(res):                   # dequantize outside the timed call
        return res[0].float() * descale_o, None
    return call, finish


def _sdpa_build(kind):
    def build(inp: Inputs):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        be = {"sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION}[kind]
        c = inp.case
        if c.causal and c.Sq != c.Sk:
            raise ValueError("SDPA's is_causal is top-left aligned; only Sq == Sk is compared")
        q, k, v = (t.transpose(1, 2) for t in (inp.q, inp.k, inp.v))

        def call():
            with sdpa_kernel(be):
                o = torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, is_causal=c.causal, scale=inp.scale, enable_gqa=c.Hq != c.Hkv)
            return o.transpose(1, 2), None
        return call
    return build


# ------------------------------------------------------------------ SageAttention (pure-Triton INT8 Q.K^T)
def _sage_missing():
    import importlib
    return _gpu_missing() or unimportable(lambda: importlib.import_module("sageattention"),
                                          "SageAttention (pip install sageattention==1.0.6)")()


def _sage_unsupported(case: Case) -> str | None:
    if (case.D, case.Dv) not in ((64, 64), (128, 128)):
        return f"SageAttention 1.0.6 takes head dims 64 and 128 (not {case.D}/{case.Dv})"
    if case.causal and case.Sq != case.Sk:
        return "SageAttention's causal mask is top-left aligned; only Sq == Sk is compared"
    return None


def _sage_build(inp: Inputs):
    """sageattn as its users call it: BF16 in, its own INT8 quantization inside the call. It
    subtracts k's mean from k in place, so it gets a copy of k (made outside the timing)."""
    from sageattention import sageattn
    k = inp.k.clone()
    return lambda: (sageattn(inp.q, k, inp.v, tensor_layout="NHD", is_causal=inp.case.causal,
                             sm_scale=inp.scale), None)


def _gpu_missing():
    return None if torch.cuda.is_available() else "no CUDA GPU"


def _no_window(case: Case) -> str | None:
    """Anchors without a sliding window (cuDNN's FP8 graph and SDPA as called here)."""
    return "no sliding window in this anchor's call" if case.window != (-1, -1) else None


def all_methods(backend: str = "triton") -> list[Method]:
    zm = _zyfa_missing(backend)
    out = [Method("zyfa", backend, "fp8", "head", _zyfa_fp8(r, backend), zm, p_rule=r,
                  unsupported=_zyfa_unsupported(backend, True, r)) for r in P_RULES]
    out.append(Method("zyfa", backend, "bf16", None, _zyfa_bf16(backend), zm,
                      unsupported=_zyfa_unsupported(backend, False, None)))
    out += [Method("zyfa", "ptx", "fp8", "head", _zyfa_fp8(r, "ptx"), _gpu_missing, p_rule=r,
                   unsupported=_zyfa_unsupported("ptx", True, r)) for r in P_RULES]
    # the fast mode: the running-max reference (label zyfa-ptx-fp8-exact-running)
    out.append(Method("zyfa", "ptx", "fp8", "head", _zyfa_fp8("exact", "ptx", ref_rule="running"), _gpu_missing,
                      p_rule="exact", ref_rule="running",
                      unsupported=_zyfa_unsupported("ptx", True, "exact", ref_rule="running")))
    # BF16: the generated kernel, and the default path (the dispatcher's choice per shape)
    out += [Method("zyfa", b, "bf16", None, _zyfa_bf16(b), _gpu_missing if b == "ptx" else zm,
                   unsupported=_zyfa_unsupported(b, False, None)) for b in ("ptx", "auto")]
    # INT8 Q.K^T (E4M3 P.V): the Triton kernel and the generated one; labels zyfa-int8qk,
    # zyfa-ptx-int8qk, zyfa-int8qk+quantize (below)
    out.append(Method("zyfa", "triton", "int8qk", "int8qk", _zyfa_fp8(None, "triton", "int8qk"), zm,
                      unsupported=_zyfa_unsupported("triton", True, None, int8_qk=True)))
    out.append(Method("zyfa", "ptx", "int8qk", "int8qk", _zyfa_fp8(None, "ptx", "int8qk"), _gpu_missing,
                      unsupported=_zyfa_unsupported("ptx", True, None, int8_qk=True)))
    out.append(Method("zyfa", "auto", "fp8", "head", _zyfa_quantize(quantize_fp8), zm, with_quantize=True,
                      unsupported=_zyfa_unsupported("auto", True, None)))
    out.append(Method("zyfa", "auto", "fp8", "head", _zyfa_quantize(quantize_fp8, "running"), zm, with_quantize=True,
                      ref_rule="running", unsupported=_zyfa_unsupported("auto", True, None, ref_rule="running")))
    out.append(Method("zyfa", "triton", "int8qk", "int8qk", _zyfa_quantize(quantize_int8_qk), zm, with_quantize=True,
                      unsupported=_zyfa_unsupported("triton", True, None, int8_qk=True)))
    out += [Method("zyfa", "auto", dtype, "head" if dtype == "fp8" else None, _zyfa_varlen(dtype, page), zm,
                   varlen=True, page_size=page) for page in (None, 64, 128) for dtype in ("fp8", "bf16")]
    out += [Method("fa3", "fa3", "fp8", "head", _fa3_varlen_build("fp8"), _fa3_missing, varlen=True),
            Method("fa3", "fa3", "bf16", None, _fa3_varlen_build("bf16"), _fa3_missing, varlen=True)]
    out += [Method("fa3", "fa3", "fp8", "head", _fa3_build("fp8"), _fa3_missing),
            Method("fa3", "fa3", "bf16", None, _fa3_build("bf16"), _fa3_missing),
            Method("cudnn", "cudnn", "fp8", "tensor", _cudnn_fp8_build, _cudnn_fe_missing, unsupported=_no_window),
            Method("sdpa_cudnn", "sdpa", "bf16", None, _sdpa_build("sdpa_cudnn"), _gpu_missing,
                   unsupported=_no_window),
            Method("sdpa_flash", "sdpa", "bf16", None, _sdpa_build("sdpa_flash"), _gpu_missing,
                   unsupported=_no_window),
            Method("sageattention", "sage", "int8", None, _sage_build, _sage_missing, unsupported=_sage_unsupported,
                   with_quantize=True)]
    from .decode_methods import decode_methods
    return out + decode_methods()
