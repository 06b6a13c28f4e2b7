"""The shapes and dtypes of zyfa's API: the head dims it takes ((qk, v) pairs; each backend says
which of them it runs) and the output dtype for each input dtype."""
from __future__ import annotations

import torch

HEAD_DIMS = ((64, 64), (128, 128), (256, 256), (192, 128))     # (192, 128): MLA


def out_dtype(dtype: torch.dtype) -> torch.dtype:
    """Attention output dtype for an input dtype: fp16 stays fp16, BF16 and FP8 give BF16."""
    return torch.float16 if dtype == torch.float16 else torch.bfloat16
