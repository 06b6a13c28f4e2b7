"""The head dims zyfa's API takes, (qk, v) pairs: each backend says which of them it runs."""
from __future__ import annotations

HEAD_DIMS = ((64, 64), (128, 128), (256, 256), (192, 128))     # (192, 128): MLA
