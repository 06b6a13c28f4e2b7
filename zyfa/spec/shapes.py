"""The shapes and dtypes of zyfa's API: the head dims it takes ((qk, v) pairs; each backend says
which of them it runs), the output dtype for each input dtype, and a packed (varlen) batch as
the kernels take it."""
from __future__ import annotations

import dataclasses
import itertools

import torch

HEAD_DIMS = ((64, 64), (128, 128), (256, 256), (192, 128))     # (192, 128): MLA
# the same pairs by Dqk: the order in which backends that run all of them list them
HEAD_DIMS_BY_QK = tuple(sorted(HEAD_DIMS))


def out_dtype(dtype: torch.dtype) -> torch.dtype:
    """Attention output dtype for an input dtype: fp16 stays fp16, BF16 and FP8 give BF16."""
    return torch.float16 if dtype == torch.float16 else torch.bfloat16


def cu_seqlens(lengths) -> list[int]:
    """A packed batch's cu_seqlens (host ints): each sequence's first position, then the total."""
    return list(itertools.accumulate(lengths, initial=0))


def starts_of(lengths) -> list[int]:
    """Each sequence's first position in a packed batch of the given lengths (host ints)."""
    return cu_seqlens(lengths)[:-1]


def page_rows(pages: list[torch.Tensor]) -> torch.Tensor:
    """Each sequence's pages (int32 host tensors, in order) as the rows of one int32 host table,
    padded with page 0 to the longest (a block table of just those sequences)."""
    table = torch.zeros(len(pages), max((len(p) for p in pages), default=0), dtype=torch.int32)
    for i, p in enumerate(pages):
        table[i, :len(p)] = p
    return table


@dataclasses.dataclass(frozen=True)
class Packed:
    """A packed (varlen) batch for the kernels: int32 device tensors of each sequence's first query
    (cu_seqlens_q, batch + 1 entries), first key in k and in v, and key count, and the
    longest lengths. (FP8 V^T's sequences start at multiples of 16 keys: ``packed_vt``.)
    A paged cache adds its block table (batch, max_pages) int32 and page size; k and v are
    then the pools, k (and BF16 v) (1, pages * page_size, Hkv, D), FP8 v (pages, page_size,
    Hkv, Dv) with each page's V^T contiguous. ``lengths``: the (query, key) lengths as host
    ints where the caller has them (a kernel that orders its tiles by them reads them there
    rather than copy the tables back)."""
    cu_q: torch.Tensor
    k_start: torch.Tensor
    v_start: torch.Tensor
    k_len: torch.Tensor
    max_seqlen_q: int
    max_seqlen_k: int
    block_table: torch.Tensor | None = None
    page_size: int = 0
    lengths: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    # sequences whose rows a later launch writes (a mixed batch's decodes): a kernel that lists
    # its tiles leaves theirs out, others may run them
    written_elsewhere: tuple[int, ...] = ()

    @property
    def batch(self) -> int:
        return self.cu_q.numel() - 1

    def host_lengths(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The (query, key) lengths as host ints (``lengths``, else read from the tables)."""
        if self.lengths is not None:
            return self.lengths
        cu = self.cu_q.tolist()
        return tuple(b - a for a, b in zip(cu, cu[1:])), tuple(self.k_len.tolist())
