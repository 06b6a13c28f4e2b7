"""A packed batch's lengths as FlashAttention's varlen calls give them (cu_seqlens prefix sums,
seqused_k, a paged cache's block table), read on the host and checked there: varlen,
explain_varlen and the varlen quantizer read them the same way."""
from __future__ import annotations

import torch

from .spec.shapes import starts_of
from .validation import check_index_tensor, check_pages_in_pool

PAGE_SIZES = range(16, 257, 16)


def check_tensor_dim(name: str, x, dims: int, layout: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != dims:
        raise ValueError(f"{name} must be {dims}-D {layout}, got shape {tuple(x.shape)}")


def int32_list(name: str, x, dims: int) -> list:
    """An int32 index tensor's values on the host."""
    return check_index_tensor(name, x, dims).tolist()


def lengths(name: str, cu, total: int, total_name: str) -> list[int]:
    """Sequence lengths from cu_seqlens (int32 (batch + 1,) prefix sums ending at total)."""
    c = int32_list(name, cu, 1)
    if len(c) < 2:
        raise ValueError(f"{name} must have batch + 1 >= 2 entries, got shape {tuple(cu.shape)}")
    if c[0] != 0:
        raise ValueError(f"{name} must start at 0, got {c[0]}")
    bad = [i for i in range(1, len(c)) if c[i] < c[i - 1]]
    if bad:
        raise ValueError(f"{name} must be non-decreasing, got {c[bad[0] - 1]} then {c[bad[0]]} at index {bad[0]}")
    if c[-1] != total:
        raise ValueError(f"{name}'s last entry ({c[-1]}) must equal the {total_name} ({total})")
    return [b - a for a, b in zip(c, c[1:])]


def check_max(name: str, given, lengths: list[int], what: str) -> None:
    if given is None:                          # computed from the lengths
        return
    if not isinstance(given, int) or isinstance(given, bool):
        raise TypeError(f"{name} must be an int, got {type(given).__name__}")
    longest = max(lengths, default=0)
    if given < longest:
        raise ValueError(f"{name} ({given}) is smaller than the longest sequence's {what} ({longest})")


def key_lengths(k, cu_seqlens_k, block_table, seqused_k, batch):
    """Keys per sequence, and each sequence's pages (paged cache: int32 rows of the block table
    on the host, as validated) or start offset (packed)."""
    if block_table is None:
        if cu_seqlens_k is None:
            raise ValueError("cu_seqlens_k is None: pass cu_seqlens_k for packed k/v, or block_table with seqused_k "
                             "(or cu_seqlens_k) for a paged KV cache")
        check_tensor_dim("k", k, 3, "(total_k, kv_heads, head_dim)")
        lens = lengths("cu_seqlens_k", cu_seqlens_k, k.shape[0], "total tokens of k (k.shape[0])")
        if len(lens) != batch:
            raise ValueError(f"cu_seqlens_k has {len(lens) + 1} entries but cu_seqlens_q has {batch + 1}: "
                             "q and k must have the same batch size")
        starts = starts_of(lens)              # each sequence's first key, from the lengths read above
        if seqused_k is not None:
            used = seqused(seqused_k, batch)
            over = [i for i, (u, n) in enumerate(zip(used, lens)) if u > n]
            if over:
                i = over[0]
                raise ValueError(f"seqused_k[{i}] ({used[i]}) exceeds sequence {i}'s keys in cu_seqlens_k ({lens[i]})")
            lens = used
        return lens, starts
    # a paged cache's key counts: seqused_k (FlashAttention-3, vLLM) or cu_seqlens_k's prefix sums
    # (FlashAttention-2); both given, they must agree
    if seqused_k is None and cu_seqlens_k is None:
        raise ValueError("block_table was given without seqused_k or cu_seqlens_k: a paged KV cache needs the keys "
                         "each sequence uses, seqused_k (batch,) int32 or cu_seqlens_k (batch + 1,) int32")
    used = seqused(seqused_k, batch) if seqused_k is not None else None
    if cu_seqlens_k is not None:
        c = int32_list("cu_seqlens_k", cu_seqlens_k, 1)
        from_cu = lengths("cu_seqlens_k", cu_seqlens_k, c[-1] if c else 0, "sum of the key counts")
        if len(from_cu) != batch:
            raise ValueError(f"cu_seqlens_k has {len(from_cu) + 1} entries but cu_seqlens_q has {batch + 1}: "
                             "q and k must have the same batch size")
        if used is not None and used != from_cu:
            raise ValueError(f"seqused_k {used} and cu_seqlens_k's lengths {from_cu} disagree; a paged cache "
                             "takes either, or both equal")
        used = from_cu
    check_tensor_dim("k", k, 4, "(num_pages, page_size, kv_heads, head_dim) with block_table")
    num_pages, page_size = k.shape[:2]
    if page_size not in PAGE_SIZES:
        raise ValueError(f"page_size (k.shape[1]) must be a multiple of 16 in 16..256, got {page_size}")
    table = check_index_tensor("block_table", block_table, 2).cpu()
    if table.shape[0] != batch:
        raise ValueError(f"block_table has {table.shape[0]} rows but cu_seqlens_q has batch {batch}")
    counts = [-(-u // page_size) for u in used]
    for i, (u, n) in enumerate(zip(used, counts)):
        if n > table.shape[1]:
            raise ValueError(f"block_table has {table.shape[1]} pages a sequence but seqused_k[{i}] ({u}) "
                             f"needs {n} pages of {page_size}")
    check_pages_in_pool("block_table", table, counts, num_pages)
    pages = [table[i, :n] for i, n in enumerate(counts)]
    return used, pages


def seqused(seqused_k, batch) -> list[int]:
    used = int32_list("seqused_k", seqused_k, 1)
    if len(used) != batch:
        raise ValueError(f"seqused_k must have shape ({batch},) (the batch of cu_seqlens_q), got {tuple(seqused_k.shape)}")
    neg = [i for i, u in enumerate(used) if u < 0]
    if neg:
        raise ValueError(f"seqused_k must be >= 0, got {used[neg[0]]} at index {neg[0]}")
    return used
