"""Facts written once in the spec and read by every path; where a path must keep its own copy
(a Triton constexpr, a kernel's reshape), it is held to the spec's here."""
import torch

from zyfa.asm.gfx950 import variant as gfx950_variant
from zyfa.asm.ptx import backend as ptx_backend
from zyfa.asm.ptx import layout
from zyfa.bench.cases import SWEEP_DIMS
from zyfa.spec.constants import KEY_BLOCK
from zyfa.spec.key_order import HOPPER_GROUP, KEY_OF_SLOT
from zyfa.spec.shapes import HEAD_DIMS
from zyfa.triton_kernels.attention import wgmma_key_order
from zyfa.triton_kernels.backend import DECODE_HEAD_DIMS
from zyfa.verify.fuzz import cases as fuzz_cases


def test_triton_wgmma_key_order_is_the_spec_s():
    """The Triton kernel's reshape of P (a copy: Triton permutes tensors by axes, not by a
    table): slot s of each 16-key group holds key KEY_OF_SLOT[s]."""
    keys = torch.arange(3 * HOPPER_GROUP).reshape(1, -1)
    got = wgmma_key_order.fn(keys).reshape(-1).tolist()
    assert got == [16 * g + KEY_OF_SLOT[s] for g in range(3) for s in range(HOPPER_GROUP)]


def test_backends_run_pairs_of_the_spec_s_table():
    spec = set(HEAD_DIMS)
    assert set(layout.HEAD_DIMS) == set(layout.HEAD_DIMS_16) == spec
    assert set(SWEEP_DIMS) == set(fuzz_cases.HEAD_DIMS) == spec
    assert set(gfx950_variant.HEAD_DIMS) == {qk for qk, _ in HEAD_DIMS}
    # the fuzz oracle's copy, written from the documents rather than imported
    assert set(fuzz_cases.PTX_HEAD_DIMS) == set(layout.HEAD_DIMS)
    assert ptx_backend.HEAD_DIMS is layout.HEAD_DIMS
    # subsets a backend declares: the Triton decode kernel's (powers of two), gfx950's value dims
    # (32: the emulator's one-tile cases, outside the spec's pairs)
    assert set(DECODE_HEAD_DIMS) <= spec
    assert set(gfx950_variant.VALUE_DIMS) - {32} <= {dv for _, dv in HEAD_DIMS}


def test_ptx_blocks_are_the_spec_s_key_blocks():
    assert layout.BLOCK_N == KEY_BLOCK == layout.layout_for(128).block_n
