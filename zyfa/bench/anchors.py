"""The anchors `zyfa bench` times beside zyfa: FlashAttention-3 (the fa3-fwd wheel; dense and
varlen), cuDNN's FP8 SDPA graph, PyTorch SDPA (flash and cuDNN) and SageAttention, each a
``missing()`` (why it cannot run here), an ``unsupported(case)`` where a case is out of its
reach, and a ``build(inputs)`` as zyfa.bench.methods describes."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import torch

from .cases import Case

if TYPE_CHECKING:
    from .methods import Inputs


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


fa3_missing = unimportable(_fa3, "FlashAttention-3 (pip install fa3-fwd)")


def out_and_lse(res):
    """FA3 returns out or (out, lse, ...)."""
    return (res[0], res[1]) if isinstance(res, tuple) else (res, None)


def fa3_build(dtype):
    def build(inp: Inputs):
        fa, c = _fa3(), inp.case
        if dtype == "bf16":
            return lambda: out_and_lse(fa(inp.q, inp.k, inp.v, softmax_scale=inp.scale, causal=c.causal,
                                     window_size=c.window))
        x = inp.fp8("head")
        v = x.v.contiguous()           # FA3 reads V in the normal layout
        return lambda: out_and_lse(fa(x.q, x.k, v, softmax_scale=inp.scale, causal=c.causal, q_descale=x.q_descale,
                                 k_descale=x.k_descale, v_descale=x.v_descale, window_size=c.window))
    return build


def fa3_varlen_build(dtype):
    def build(inp: Inputs):
        fa, a = _fa3(varlen=True), inp.varlen_args(dtype == "fp8")
        if dtype == "fp8":
            a["v"] = a["v"].contiguous()          # FA3 reads V in the normal layout

        def call():
            out, lse = out_and_lse(fa(**a, softmax_scale=inp.scale, causal=inp.case.causal, window_size=inp.case.window))
            return out[None], None if lse is None else lse[None]
        return call
    return build


# ------------------------------------------------------------------ cuDNN
def cudnn_fe_missing():
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


def cudnn_fp8_build(inp: Inputs):
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


def sdpa_build(kind):
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
def sage_missing():
    import importlib
    return gpu_missing() or unimportable(lambda: importlib.import_module("sageattention"),
                                          "SageAttention (pip install sageattention==1.0.6)")()


def sage_unsupported(case: Case) -> str | None:
    if (case.D, case.Dv) not in ((64, 64), (128, 128)):
        return f"SageAttention 1.0.6 takes head dims 64 and 128 (not {case.D}/{case.Dv})"
    if case.causal and case.Sq != case.Sk:
        return "SageAttention's causal mask is top-left aligned; only Sq == Sk is compared"
    return None


def sage_build(inp: Inputs):
    """sageattn as its users call it: BF16 in, its own INT8 quantization inside the call. It
    subtracts k's mean from k in place, so it gets a copy of k (made outside the timing)."""
    from sageattention import sageattn
    k = inp.k.clone()
    return lambda: (sageattn(inp.q, k, inp.v, tensor_layout="NHD", is_causal=inp.case.causal,
                             sm_scale=inp.scale), None)


def gpu_missing():
    return None if torch.cuda.is_available() else "no CUDA GPU"


def no_window(case: Case) -> str | None:
    """Anchors without a sliding window (cuDNN's FP8 graph and SDPA as called here)."""
    return "no sliding window in this anchor's call" if case.window != (-1, -1) else None
