"""The backends zyfa ships, registered fastest first. Each states what it supports beside its
kernel (a backend.py with ``supports(problem)`` and ``run``); the packed entries of those that
run a packed batch in one launch are zyfa.packed's. This module only orders them."""
from __future__ import annotations

from . import dispatch, packed
from .asm.gfx950 import backend as gfx950
from .asm.ptx import backend as ptx
from .spec import backend as reference
from .triton_kernels import backend as triton

for _backend in (dispatch.Backend("ptx", ptx.supports, ptx.run, run_packed=packed.ptx_packed),
                 dispatch.Backend("gfx950", gfx950.supports, gfx950.run),
                 dispatch.Backend("triton", triton.supports, triton.run, run_packed=packed.triton_packed,
                                  run_paged=packed.triton_paged),
                 dispatch.Backend("reference", reference.supports, reference.run)):
    dispatch.register(_backend)
