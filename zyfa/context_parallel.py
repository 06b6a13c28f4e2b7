"""Context-parallel causal prefill: one sequence's attention spread over the ranks of a
torch.distributed group (ring attention, forward only). docs/context_parallel.md explains it.

Layout. The sequence (length S) is cut into 2W chunks of C = S / 2W tokens (W ranks); rank r
holds chunks r and 2W-1-r, front and back, concatenated in that order (``shard_sequence``).
Under a causal mask every rank then has the same work.

Ring. K/V shards travel around the ring (rank r sends to r+1 and receives from r-1) with
asynchronous point-to-point sends overlapped with the attention on the shard in hand; at step
s rank r holds the K/V of rank src = (r - s) mod W. The descales travel with their K/V. With
causal=True each step is one zyfa.flash_attn_func call (return_lse=True):

  s = 0     (src = r)  local q vs local k/v, causal: local order keeps global order, so front
                       rows see their own chunk causally and back rows see the front chunk
                       whole and their own chunk causally (the diagonal pairs, equal lengths);
  src < r              all local q vs src's front chunk, not causal (both chunks lie earlier);
  src > r              local back q vs src's whole shard, not causal (the front query chunk
                       sees neither of src's chunks; the back one sees both whole).

With causal=False every step is all local q vs the whole shard in hand. Partial outputs are
merged in float32 by their LSE: lse = logaddexp(lse, lse_i), out = out e^(lse_old - lse) +
out_i e^(lse_i - lse). Seqlen_q must equal seqlen_k (self-attention prefill over one sequence).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from .api import flash_attn_func
from .spec.descales import is_per_key_block, normalize_descales
from .spec.rules import DEFAULT_P_RULE, DEFAULT_REF_RULE, check_rules
from .validation import validate

_DTYPES = (torch.bfloat16, torch.float16, torch.float8_e4m3fn)


def _check_divisible(n: int, world: int, what: str) -> int:
    if world < 1:
        raise ValueError(f"world must be >= 1, got {world}")
    if n % (2 * world):
        raise ValueError(f"{what} {n} must be divisible by 2 * world = {2 * world} (the sequence is cut into "
                         f"2 * world equal chunks; rank r holds chunks r and 2 * world - 1 - r); pad the sequence")
    return n // (2 * world)


def shard_sequence(x: torch.Tensor, rank: int, world: int, dim: int = 1) -> torch.Tensor:
    """Rank ``rank``'s shard of a full sequence along ``dim``: chunks rank and 2*world-1-rank of
    2*world equal chunks, concatenated (q/k/v: dim=1; per-token descales (B, H, S): dim=2)."""
    if not 0 <= rank < world:
        raise ValueError(f"rank must be in [0, {world}), got {rank}")
    c = _check_divisible(x.shape[dim], world, f"sequence length (dim {dim})")
    front = x.narrow(dim, rank * c, c)
    back = x.narrow(dim, (2 * world - 1 - rank) * c, c)
    return torch.cat([front, back], dim)


def unshard_sequence(shards, dim: int = 1) -> torch.Tensor:
    """The full sequence from every rank's shard (a list in rank order), inverse of
    ``shard_sequence``: outputs use dim=1, LSEs (B, H, S) dim=2."""
    world = len(shards)
    if world < 1:
        raise ValueError("unshard_sequence needs at least one shard")
    sizes = {s.shape[dim] for s in shards}
    if len(sizes) != 1 or sizes.pop() % 2:
        raise ValueError(f"shards must share one even length along dim {dim}, got "
                         f"{[s.shape[dim] for s in shards]}")
    c = shards[0].shape[dim] // 2
    fronts = [s.narrow(dim, 0, c) for s in shards]
    backs = [s.narrow(dim, c, c) for s in reversed(shards)]
    return torch.cat(fronts + backs, dim)


def gather_sequence(x_local: torch.Tensor, group=None, dim: int = 1) -> torch.Tensor:
    """All-gather every rank's shard and unshard them: the full sequence on every rank."""
    if not dist.is_available() or (group is None and not dist.is_initialized()):
        raise RuntimeError("gather_sequence needs torch.distributed initialized (dist.init_process_group) or a "
                           "process group; with one process the sequence is already whole")
    world = dist.get_world_size(group)
    parts = [torch.empty_like(x_local) for _ in range(world)]
    dist.all_gather(parts, x_local.contiguous(), group=group)
    return unshard_sequence(parts, dim)


def _describe(x) -> list[int]:
    """dim, shape (padded to 4) and dtype of a tensor (or None) as ints every rank can compare."""
    if x is None:
        return [-1] * 6
    if not isinstance(x, torch.Tensor) or x.dim() > 4:
        return [-2] * 6
    return [x.dim()] + list(x.shape) + [0] * (4 - x.dim()) + [_DTYPES.index(x.dtype) if x.dtype in _DTYPES else -1]


def _show(fields: list[int]) -> str:
    parts = []
    for name, i in zip(("q", "k", "v", "q_descale", "k_descale", "v_descale"), range(0, 36, 6)):
        dim, dtype = fields[i], fields[i + 5]
        shape = tuple(fields[i + 1:i + 1 + dim]) if dim >= 0 else None
        parts.append(f"{name} {shape}" + (f" {_DTYPES[dtype]}" if dtype >= 0 and name in "qkv" else ""))
    return ", ".join(parts) + f", causal {bool(fields[-1])}"


def _check_same_everywhere(tensors, causal, group, device) -> None:
    """One all_gather of a small int64 tensor: every rank must pass the same shapes, dtypes,
    descale layouts and causal flag. Raises on every rank (so none is left waiting)."""
    mine = torch.tensor([f for x in tensors for f in _describe(x)] + [int(bool(causal))], dtype=torch.int64,
                        device=device)
    every = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(every, mine, group=group)
    differ = [i for i, t in enumerate(every) if not torch.equal(t, every[0])]
    if differ:
        raise ValueError(f"context_parallel_attention: ranks {differ} were called with other shapes, dtypes or "
                         f"causal flag than rank 0; every rank must pass its shard of one sequence "
                         f"(shard_sequence).\n  rank 0: {_show(every[0].tolist())}\n"
                         f"  rank {differ[0]}: {_show(every[differ[0]].tolist())}")


class Ring:
    """The K/V shard (and its descales) in hand, and its transfer to the next rank. Tensors
    travel as bytes (gloo and NCCL both move uint8), each with its dtype and shape kept here."""

    def __init__(self, tensors, group):
        g = group if group is not None else dist.group.WORLD
        world, rank = dist.get_world_size(g), dist.get_rank(g)
        self.group = group
        self.send_to = dist.get_global_rank(g, (rank + 1) % world)
        self.recv_from = dist.get_global_rank(g, (rank - 1) % world)
        self.meta = [None if t is None else (t.dtype, t.shape) for t in tensors]
        self.buffers = [None if t is None else t.contiguous().reshape(-1).view(torch.uint8) for t in tensors]
        self.pending = None

    def tensors(self):
        return [None if b is None else b.view(m[0]).reshape(m[1]) for b, m in zip(self.buffers, self.meta)]

    def start(self) -> None:
        """Send the shard in hand on and receive the previous rank's, asynchronously."""
        incoming = [None if b is None else torch.empty_like(b) for b in self.buffers]
        ops = []
        for out, inc in zip(self.buffers, incoming):
            if out is not None:
                ops.append(dist.P2POp(dist.isend, out, self.send_to, self.group))
                ops.append(dist.P2POp(dist.irecv, inc, self.recv_from, self.group))
        self.pending = (dist.batch_isend_irecv(ops), incoming)

    def finish(self) -> None:
        """Wait for the transfer; the received shard is now the one in hand."""
        works, incoming = self.pending
        for w in works:
            w.wait()
        self.buffers, self.pending = incoming, None


def _merge(acc, lse, rows: slice, out_i, lse_i) -> None:
    """Fold a partial (out_i (B, n, H, Dv), lse_i (B, H, n)) into rows of the float32 running
    (acc (B, S, H, Dv), lse (B, H, S)) by log-sum-exp weights."""
    old = lse[:, :, rows]
    new = torch.logaddexp(old, lse_i)
    w_old = torch.exp(old - new).transpose(1, 2).unsqueeze(-1)
    w_new = torch.exp(lse_i - new).transpose(1, 2).unsqueeze(-1)
    acc[:, rows] = acc[:, rows] * w_old + out_i.float() * w_new
    lse[:, :, rows] = new


def _rows(d, rows: slice):
    """A per-token descale (B, H, S) restricted to rows; coarse ones are shared by all rows."""
    return d[..., rows].contiguous() if d is not None and d.dim() == 3 else d


def context_parallel_attention(q_local, k_local, v_local, group=None, softmax_scale=None, causal=True,
                               q_descale=None, k_descale=None, v_descale=None, return_lse=False,
                               backend="auto", p_rule=None, ref_rule=None):
    """zyfa.flash_attn_func over a sequence sharded across the ranks of ``group``.

    q_local (B, S/W, Hq, D), k_local/v_local (B, S/W, Hkv, D[v]): this rank's shards from
    ``shard_sequence`` (S divisible by 2W). Per-token descales are sharded the same way along
    their last dim (dim=2); coarse ones are passed as they are; k descales a block of 128 of
    the shard's keys (B, Hkv, ceil(S/W / 128)) stand for their keys' (the shard's chunks cut
    blocks, so they travel expanded to one a key). Every rank must call with the
    same shapes. Returns this rank's output shard (B, S/W, Hq, Dv) in the sharded order, and with
    return_lse its float32 LSE shard (B, Hq, S/W); ``unshard_sequence`` / ``gather_sequence``
    reassemble them. A group of one rank (or torch.distributed not initialized and group None)
    is the single-process call.
    """
    kw = dict(softmax_scale=softmax_scale, backend=backend, p_rule=p_rule, ref_rule=ref_rule)
    if not dist.is_available() or (group is None and not dist.is_initialized()) or dist.get_world_size(group) == 1:
        return flash_attn_func(q_local, k_local, v_local, causal=causal, q_descale=q_descale, k_descale=k_descale,
                               v_descale=v_descale, return_lse=return_lse, **kw)
    device = q_local.device if dist.get_backend(group) == "nccl" else torch.device("cpu")
    _check_same_everywhere((q_local, k_local, v_local, q_descale, k_descale, v_descale), causal, group, device)
    n = q_local.shape[1] if isinstance(q_local, torch.Tensor) and q_local.dim() == 4 else None
    if n is not None and isinstance(k_local, torch.Tensor) and k_local.dim() == 4 and k_local.shape[1] != n:
        raise ValueError(f"context_parallel_attention needs seqlen_q == seqlen_k (q and k/v shards of one sequence, "
                         f"self-attention prefill), got local seqlen_q {n}, seqlen_k {k_local.shape[1]}: with a "
                         f"cached prefix the query and key chunks no longer pair up; use flash_attn_func per rank")
    validate(q_local, k_local, v_local, causal, softmax_scale, q_descale, k_descale, v_descale)
    check_rules(p_rule or DEFAULT_P_RULE, ref_rule or DEFAULT_REF_RULE)    # the rest on the first call
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    _check_divisible(n * world, world, f"sequence length ({world} ranks x {n} local tokens) =")
    c = n // 2
    if is_per_key_block(k_descale, n):    # a descale a block of the shard's keys: the shard's chunks cut blocks
        k_descale = normalize_descales(q_local, k_local, v_local, None, k_descale, None)[1]

    ring = Ring([k_local, v_local, k_descale, v_descale], group)
    acc = lse = None
    for step in range(world):
        if step + 1 < world:
            ring.start()                  # the next shard travels while this one is computed
        k, v, kd, vd = ring.tensors()
        src = (rank - step) % world
        if not causal or src == rank:     # whole local q vs the whole shard in hand
            qrows, keys, diag = slice(0, n), slice(0, n), causal
        elif src < rank:                  # both query chunks vs src's front chunk
            qrows, keys, diag = slice(0, n), slice(0, c), False
        else:                             # the back query chunk vs both of src's chunks
            qrows, keys, diag = slice(c, n), slice(0, n), False
        out_i, lse_i = flash_attn_func(q_local[:, qrows], k[:, keys], v[:, keys], causal=diag,
                                       q_descale=_rows(q_descale, qrows), k_descale=_rows(kd, keys),
                                       v_descale=vd, return_lse=True, **kw)
        if acc is None:                   # step 0 covers every local row
            acc, lse, out_dtype = out_i.float(), lse_i.clone(), out_i.dtype
        else:
            _merge(acc, lse, qrows, out_i, lse_i)
        if step + 1 < world:
            ring.finish()
    out = acc.to(out_dtype)
    return (out, lse) if return_lse else out
