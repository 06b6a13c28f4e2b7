"""Key splits of a decode call and their merge, shared by the decode kernels (Triton's and the
Gluon E4M3 one): how many splits a (sequence, kv head) takes, and the Triton kernel that
combines the splits' partial outputs through their natural-log LSE. It lives outside either
kernel package, as zyfa.hopper_vt does."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .device import interpreter_active, sm_count
from .launch_sizes import next_power_of_2

# Programs the split aims for, in multiples of the SM count: more than one a SM, so that each
# SM has loads of several programs in flight while another waits on memory.
WAVES = 2
# Fewest keys a split: a shorter one spends as much on its prologue, epilogue and merge row as
# on its loads.
MIN_SPLIT_KEYS = 512
MAX_SPLITS = 64                  # the merge kernel holds all of a row's partials in registers
# Under the interpreter (no SM count): splits enough that short test sequences leave some empty.
INTERPRETER_SPLITS = 3


def decode_splits(batch: int, kv_heads: int, max_keys: int, device: torch.device, sm_margin: int = 0,
                  sms: int | None = None, per_sm: int = 1) -> int:
    """Key splits a (sequence, kv head): one where batch * kv_heads programs fill WAVES x the
    SMs, else enough to, at least MIN_SPLIT_KEYS keys each (of the longest sequence the cache
    can hold), at most MAX_SPLITS, then evened out over rounds of ``per_sm`` programs an SM
    (even_splits). ``sms``: the SM count (else the device's; the interpreter takes
    INTERPRETER_SPLITS)."""
    if sms is None:
        if interpreter_active() or device.type != "cuda":
            return INTERPRETER_SPLITS
        sms = sm_count(device)
    sms = max(sms - sm_margin, 1)
    programs = batch * kv_heads
    want = -(-WAVES * sms // programs)
    most = min(-(-max_keys // MIN_SPLIT_KEYS), MAX_SPLITS)
    if want <= 1 or most <= 1:
        return 1
    return even_splits(programs, min(want, most), most, sms * per_sm)


def even_splits(programs: int, least: int, most: int, sms: int) -> int:
    """The split count in [least, min(2 least, most)] whose programs come closest to a whole
    number of rounds over ``sms`` slots (SMs times the programs each holds at once): a
    memory-bound SM takes as long as its programs' keys, so the call lasts as long as the SM
    given the most programs. 8 x 8 programs on 132 one-program slots: 5 splits leave 320
    programs, 3 on some SMs and 2 on the rest (81% of the SMs' time used), 6 leave 384 (97%).
    The fewest splits among equals (fewer partials to merge)."""
    best, best_use = least, 0.0
    for s in range(least, max(least, min(2 * least, most)) + 1):
        n = programs * s
        use = n / (-(-n // sms) * sms)
        if use > best_use + 1e-9:
            best, best_use = s, use
    return best


@triton.jit
def merge_kernel(O_PART, LSE_PART, O, LSE, n_splits, Hq, Hkv, stride_ob, stride_os, stride_oh,
                 SQ: tl.constexpr, GROUP: tl.constexpr, DV: tl.constexpr, SPLITS: tl.constexpr):
    """Grid (batch * kv_heads * GROUP * SQ,): one output row from its n_splits partials
    (SPLITS: n_splits rounded up to a power of two), weighted by exp(lse_s - lse):
    lse = max + ln(sum exp(lse_s - max)), out = sum exp(lse_s - lse) * out_s, in float32,
    summed in one fixed order."""
    pid = tl.program_id(0)
    rows = GROUP * SQ
    bk = pid // rows
    r = pid % rows
    s = tl.arange(0, SPLITS)
    parts = bk * n_splits + s
    ok = s < n_splits
    lse_s = tl.load(LSE_PART + parts * rows + r, mask=ok, other=float("-inf"))
    top = tl.max(lse_s, 0)
    top = tl.where(top == float("-inf"), 0.0, top)
    w = tl.exp(lse_s - top)
    total = tl.sum(w, 0)
    offs_dv = tl.arange(0, DV)
    o_s = tl.load(O_PART + (parts * rows + r)[:, None] * DV + offs_dv[None, :], mask=ok[:, None], other=0.0)
    out = tl.sum(o_s * w[:, None], 0) / total
    b = bk // Hkv
    h = (bk % Hkv) * GROUP + r // SQ
    qi = r % SQ
    tl.store(O + b * stride_ob + qi * stride_os + h * stride_oh + offs_dv, out.to(O.dtype.element_ty))
    tl.store(LSE + (b * Hq + h) * SQ + qi, top + tl.log(total))


def split_parts(B: int, Hkv: int, splits: int, rows: int, Dv: int, lse: torch.Tensor):
    """(partial outputs (B * Hkv, splits, rows, Dv), their LSEs (B * Hkv, splits, rows)), float32,
    where a call splits its keys; else ``lse`` twice (a pointer the kernel never writes through)."""
    if splits == 1:
        return lse, lse
    return (torch.empty(B * Hkv, splits, rows, Dv, dtype=torch.float32, device=lse.device),
            torch.empty(B * Hkv, splits, rows, dtype=torch.float32, device=lse.device))


def merge_splits(o_part, lse_part, out, lse, splits: int, Hq: int, Hkv: int, Sq: int) -> None:
    """merge_kernel's launch: ``out`` (B, Sq, Hq, Dv) and ``lse`` (B, Hq, Sq) from the partials."""
    group = Hq // Hkv
    merge_kernel[(o_part.shape[0] * group * Sq,)](
        o_part, lse_part, out, lse, splits, Hq, Hkv, out.stride(0), out.stride(1), out.stride(2),
        SQ=Sq, GROUP=group, DV=out.shape[-1], SPLITS=next_power_of_2(splits), num_warps=1)
