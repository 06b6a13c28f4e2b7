"""Host side of the Triton attention kernel: strides, descales, grid, tile choice."""
from __future__ import annotations

import math

import torch
import triton
from triton.tools.tensor_descriptor import TensorDescriptor

from ..device import device_arch, hardware_rounding, interpreter_active
from ..launch_sizes import cdiv
from ..spec.constants import LOG2E
from ..spec.descales import coarse_descale, is_per_token, normalize_descales, per_channel_v_descale
from ..hopper_vt import hopper_vt
from ..spec.rules import DEFAULT_P_RULE, DEFAULT_REF_RULE
from ..spec.shapes import Packed, out_dtype
from ..tma import tma_aligned, tma_ready
from .attention import REF_RULE_IDS, attention_fwd_kernel
from .p_rules import P_RULE_IDS
from .tuning import TileConfig, choose, tuning_key


def _descale_args(q, k, v, q_descale, k_descale, v_descale, B):
    """Kernel descale tensors and whether q/k scales are per token (B: the batch, which a
    packed batch's batch-1 view does not show)."""
    Hkv = k.shape[2]
    if is_per_token(q_descale) or is_per_token(k_descale):
        qs, ks, vs = normalize_descales(q, k, v, q_descale, k_descale, v_descale)
        return qs, ks, vs, True
    vs = per_channel_v_descale(v_descale.to(q.device), B, Hkv, v.shape[-1])   # q/k stay (B, Hkv)
    return (coarse_descale(q_descale.to(q.device), B, Hkv, "q_descale"),
            coarse_descale(k_descale.to(q.device), B, Hkv, "k_descale"), vs, False)


def transposed_v(v: torch.Tensor, wgmma_key_order: bool = False) -> torch.Tensor:
    """(B, Hkv, Dv, Sk) view of v with Sk contiguous and 16-byte aligned rows (copies if needed).

    wgmma_key_order: keys reordered within each group of 16 as the kernel reorders P's columns
    (attention.wgmma_key_order) and Sk zero-padded to a multiple of 16, in one launch
    (zyfa.hopper_vt: zyfa.spec.key_order.hopper_vt's bytes, which the generated kernel
    reads too)."""
    if wgmma_key_order:
        return hopper_vt(v).view(v.dtype)
    vt = v.permute(0, 2, 3, 1)
    if tma_aligned(vt):
        return vt
    B, Sk, Hkv, Dv = v.shape
    pad = (-Sk) % 16
    buf = torch.zeros(B, Hkv, Dv, Sk + pad, dtype=v.dtype, device=v.device)
    buf[..., :Sk] = vt
    return buf[..., :Sk]


def wgmma_key_order(device: torch.device, seqlen_k: int, group: int, head_dim: int) -> bool:
    """Whether the FP8 kernel reorders keys so that P feeds the P.V wgmma straight from the
    QK^T accumulator's registers (Hopper, not under the interpreter).

    The kernel gets faster, but V^T is then reordered on every call, a copy that grows with
    Sk where the kernel grows with Sk^2 * (Hq / Hkv): it pays only at d128 with Sk times the
    group size from 32K, not on MLA's 192/128 (measured: docs/decisions.md)."""
    return (device_arch(device) == "sm90" and not interpreter_active() and head_dim == 128
            and seqlen_k * group >= 32768)


def default_tile(device: torch.device, is_fp8: bool, dqk: int, dv: int, causal: bool, seqlen_k: int) -> TileConfig:
    """The tile a call takes without autotuning (the tuned table's entry, or the default)."""
    return choose(tuning_key(device_arch(device), is_fp8, dqk, dv, causal, seqlen_k), dqk, dv, is_fp8)[0]


def triton_attention(q, k, v, softmax_scale=None, causal=True, q_descale=None, k_descale=None,
                     v_descale=None, p_rule=DEFAULT_P_RULE, ref_rule=DEFAULT_REF_RULE,
                     config: TileConfig | None = None, hw_round: bool | None = None,
                     permute_keys: bool | None = None, packed: Packed | None = None, window_size=(-1, -1)):
    """Run the Triton kernel; inputs already validated. Returns (out, lse). ``hw_round``:
    the exact rule's E4M3 rounding by the GPU's conversion instruction (None: wherever it
    exists, hardware_rounding()) instead of integer arithmetic; the codes are the same.
    ``permute_keys``: the FP8 kernel's key reorder (None: wherever it saves shuffles,
    wgmma_key_order()); it changes only the order of P.V's sums. ``packed``: q, k, v are a
    packed batch's tokens as batch 1, (1, total, heads, dim); out (1, total_q, Hq, Dv) and
    LSE (1, Hq, total_q) as for one sequence of all the tokens, each row from its own one.
    ``window_size``: (left, right) as validated (zyfa.validation.check_window: causal means
    right 0); the kernel skips the key blocks outside it."""
    B, Sq, Hq, D = q.shape
    Sk, Hkv, Dv = k.shape[1], k.shape[2], v.shape[-1]
    out_shape, lse_shape, total_q = (B, Sq, Hq, Dv), (B, Hq, Sq), Sq
    if packed is not None:                 # the grid, tiles and descales go by the sequences
        B, Sq, Sk = packed.batch, packed.max_seqlen_q, packed.max_seqlen_k
    is_fp8 = v.dtype == torch.float8_e4m3fn           # E4M3 P.V; q and k E4M3 or int8
    qk_int8 = q.dtype == torch.int8
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    out_type = out_dtype(q.dtype)
    # Triton's interpreter truncates float32 -> bf16 and multiplies bf16 as raw bits:
    # under it, write float32 and round in torch, and feed dots float32 operands
    interp = interpreter_active()
    out = torch.empty(out_shape, dtype=torch.float32 if interp else out_type, device=q.device)
    lse = torch.empty(lse_shape, dtype=torch.float32, device=q.device)
    q, k = tma_ready(q), tma_ready(k)
    key_order = is_fp8 and (wgmma_key_order(q.device, Sk, Hq // Hkv, D) if permute_keys is None else permute_keys)
    key_order = key_order and packed is None and not qk_int8    # a sequence's keys need not start a group of 16
    if is_fp8:
        qd, kd, vd, per_token = _descale_args(q, k, v, q_descale, k_descale, v_descale, B)
        v = transposed_v(v, key_order)
    else:
        v = tma_ready(v)
        qd = kd = vd = lse            # unused placeholders
        per_token = False
    d_main, d_tail = (128, 64) if D == 192 else (D, 0)
    # only the exact rule rounds: the lean rules keep one compiled kernel whatever the GPU
    hw = is_fp8 and p_rule == "exact" and not interp and (hardware_rounding(q.device) if hw_round is None else hw_round)

    def launch(cfg: TileConfig):
        bm, bn = cfg.block_m, cfg.block_n
        q_desc = TensorDescriptor.from_tensor(q, [1, bm, 1, d_main])
        k_desc = TensorDescriptor.from_tensor(k, [1, bn, 1, d_main])
        q_tail = TensorDescriptor.from_tensor(q, [1, bm, 1, d_tail]) if d_tail else q_desc
        k_tail = TensorDescriptor.from_tensor(k, [1, bn, 1, d_tail]) if d_tail else k_desc
        v_desc = TensorDescriptor.from_tensor(v, [1, 1, Dv, bn] if is_fp8 else [1, bn, 1, Dv])
        o_desc = TensorDescriptor.from_tensor(out, [1, bm, 1, Dv])
        grid = (cdiv(Sq, bm), B * Hq)
        cu_q, k_start, v_start, k_len = ((packed.cu_q, packed.k_start, packed.v_start, packed.k_len) if packed
                                         else (lse, lse, lse, lse))
        paged = packed is not None and packed.page_size > 0
        if paged and packed.page_size % bn:
            raise ValueError(f"a paged cache needs pages of a multiple of the key tile ({bn}), got {packed.page_size}")
        table = packed.block_table if paged else lse
        left, right = window_size
        attention_fwd_kernel[grid](
            q_desc, q_tail, k_desc, k_tail, v_desc, o_desc, lse, qd, kd, vd,
            Sq, Sk, Hq, Hkv, scale * LOG2E, out, cu_q, k_start, k_len, v_start, Hq * Dv, total_q,
            table, table.stride(0) if paged else 0, max(left, 0), 0 if causal else max(right, 0),
            IS_FP8=is_fp8, PER_TOKEN_QK=per_token, P_RULE=P_RULE_IDS[p_rule],
            REF_RULE=REF_RULE_IDS[ref_rule], CAUSAL=causal or right >= 0, WINDOW=left >= 0,
            D=d_main, D_TAIL=d_tail, DV=Dv, BLOCK_M=bm, BLOCK_N=bn, UPCAST_DOT=interp and not is_fp8,
            HW_ROUND=hw, WGMMA_KEY_ORDER=key_order, VARLEN=packed is not None, PAGE=packed.page_size if paged else 0,
            QK_INT8=qk_int8,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages)

    if config is None:
        def bench(cfg):
            return triton.testing.do_bench(lambda: launch(cfg), warmup=5, rep=20)
        key = tuning_key(device_arch(q.device), is_fp8, D, Dv, causal, Sk)
        config, _ = choose(key, D, Dv, is_fp8, bench)
    launch(config)
    return out.to(out_type), lse
