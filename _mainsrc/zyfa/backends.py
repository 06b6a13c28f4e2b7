"""The backends zyfa ships, registered fastest first. Each states what it supports beside its
kernel (a backend.py with ``supports(problem)`` and ``run``); this module only orders them."""
from __future__ import annotations

from . import dispatch
from .asm.gfx950 import backend as gfx950
from .asm.ptx import backend as ptx
from .spec import backend as reference
from .triton_kernels import backend as triton

for _name, _module in (("ptx", ptx), ("gfx950", gfx950), ("triton", triton), ("reference", reference)):
    dispatch.register(dispatch.Backend(_name, _module.supports, _module.run))
