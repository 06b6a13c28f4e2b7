"""zyfa.asm.ptx.vt_transpose: one warp's ldmatrix .trans / byte permutes / stmatrix, run on the
CPU by zyfa.verify.ptx.evaluate, puts each key of a key-major V block in its A-operand slot of
the V^T rows (zyfa.spec.key_order.KEY_OF_SLOT); the evaluator's ldmatrix / stmatrix are held to
the PTX ISA's fragment layout on their own; on a Hopper GPU the same PTX (zyfa.verify.ptx.vt_block)
is held to the same placement, which tests the evaluator's model of the two instructions too."""
import numpy as np
import pytest
import torch

from conftest import hopper
from zyfa.asm.ptx.assemble import assemble
from zyfa.asm.ptx.target import module, program
from zyfa.asm.ptx.vt_transpose import BYTES, KEYS, emit_vt_tile, emit_vt_transpose
from zyfa.spec.key_order import KEY_OF_SLOT
from zyfa.verify.ptx.evaluate import Evaluator, render_body

LANES = np.arange(32, dtype=np.uint32)


def test_ldmatrix_and_stmatrix_follow_the_fragment_layout():
    """Lane t gets elements (t / 4, 2 (t % 4) + h) of each 8 x 8 tile, (2 (t % 4) + h, t / 4)
    with .trans; stmatrix writes them back where ldmatrix read them."""
    rng = np.random.default_rng(0)
    mem = rng.integers(0, 256, 1024, dtype=np.uint8)
    elems = lambda tile, r, c: int(mem[tile * 256 + r * 32 + 2 * c]) | int(mem[tile * 256 + r * 32 + 2 * c + 1]) << 8
    addr = ((LANES // 8) * 256 + (LANES % 8) * 32).astype(np.uint32)          # tile i at 256 i, rows 32 bytes apart
    for trans in (False, True):
        ev = Evaluator({"%a": addr}, shared=mem.copy())
        t = ".trans" if trans else ""
        ev.step(f"ldmatrix.sync.aligned.m8n8.x4{t}.shared.b16 {{%r0, %r1, %r2, %r3}}, [%a];")
        for tile in range(4):
            for lane in range(32):
                word = int(ev.regs[f"%r{tile}"][lane])
                for h in (0, 1):
                    r, c = (2 * (lane % 4) + h, lane // 4) if trans else (lane // 4, 2 * (lane % 4) + h)
                    assert (word >> 16 * h) & 0xFFFF == elems(tile, r, c)
        if not trans:
            ev.shared[:] = 0
            ev.step("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%a], {%r0, %r1, %r2, %r3};")
            rows = [tile * 256 + r * 32 + b for tile in range(4) for r in range(8) for b in range(16)]
            assert np.array_equal(ev.shared[rows], mem[rows])


@pytest.mark.parametrize("v_stride,vt_stride", [(128, 64), (64, 16 * 9)])
def test_vt_transpose_puts_each_key_in_its_slot(v_stride, vt_stride):
    prog = program()
    lane, v0, vt0 = prog.regs("u32", 3)
    emit_vt_transpose(prog, lane, v0, v_stride, vt0, vt_stride)
    rng = np.random.default_rng(v_stride)
    v_base, vt_base = 0, 4096
    mem = np.zeros(vt_base + BYTES * vt_stride, np.uint8)
    v = rng.integers(0, 256, (KEYS, BYTES), dtype=np.uint8)
    for key in range(KEYS):
        mem[v_base + key * v_stride: v_base + key * v_stride + BYTES] = v[key]
    ev = Evaluator({str(lane): LANES, str(v0): np.full(32, v_base, np.uint32),
                    str(vt0): np.full(32, vt_base, np.uint32)}, shared=mem)
    ev.run(render_body(prog))
    vt = np.stack([mem[vt_base + d * vt_stride: vt_base + d * vt_stride + KEYS] for d in range(BYTES)])
    assert np.array_equal(vt, v[list(KEY_OF_SLOT)].T)          # slot s of row d: key KEY_OF_SLOT[s], byte d
    assert not mem[BYTES * v_stride:vt_base].any()             # nothing written outside V^T's rows


def _assert_matrix_ops_only(emit_transpose, blocks: int) -> None:
    """The SASS of a kernel that runs ``emit_transpose(prog, lane, group, v0, vt0)`` (lane and
    group from the thread index, both tiles at 0): one LDSM .trans, four PRMTs and one STSM a
    block, no byte-wide shared loads (what Triton's decode kernel spends its issue slots on)."""
    from zyfa.verify.ptx.sass import instructions
    prog = program()
    lane, group, v0, vt0 = prog.regs("u32", 4)
    prog.emit("mov.u32", lane, "%tid.x")
    prog.emit("shr.u32", group, lane, 5)
    prog.emit("and.b32", lane, lane, 31)
    for r in (v0, vt0):
        prog.emit("mov.u32", r, 0)
    emit_transpose(prog, lane, group, v0, vt0)
    prog.emit("ret")
    ptx = module("vt_transpose_check", [], prog, shared=[".shared .align 1024 .b8 smem[8192];"])
    names = [i.mnemonic for i in instructions(assemble(ptx, "sm_90a").sass())]
    assert names.count("LDSM.16.MT88.4") == blocks and names.count("STSM.16.M88.4") == blocks, names
    assert names.count("PRMT") == 4 * blocks, names
    assert not any(n.startswith("LDS") and n != "LDSM.16.MT88.4" for n in names), names


def test_vt_transpose_assembles_to_matrix_loads_and_stores():
    """ptxas keeps the warp's transpose as one LDSM .trans, four PRMTs and one STSM."""
    _assert_matrix_ops_only(lambda prog, lane, group, v0, vt0: emit_vt_transpose(prog, lane, v0, 128, vt0, 64), 1)


@hopper
@pytest.mark.parametrize("row_bytes", [32, 128, 1040])
def test_vt_block_on_the_gpu_puts_each_key_in_its_slot(row_bytes):
    from zyfa.verify.ptx.vt_block import vt_block
    g = torch.Generator().manual_seed(row_bytes)
    rows = torch.randint(0, 256, (KEYS, row_bytes), generator=g, dtype=torch.uint8)
    want = rows[list(KEY_OF_SLOT), :BYTES].T
    assert torch.equal(vt_block(rows.cuda()).cpu(), want)
    assert torch.equal(vt_block(rows.cuda(), ctas=3, warps=4, rounds=5).cpu(), want)   # warps' own regions


def test_vt_block_kernel_assembles_without_byte_loads():
    from zyfa.verify.ptx.sass import instructions
    from zyfa.verify.ptx.vt_block import vt_block_kernel
    built = assemble(vt_block_kernel()[1], "sm_90a")
    names = [i.mnemonic for i in instructions(built.sass())]
    assert built.spill_bytes == 0
    assert names.count("LDSM.16.MT88.4") == 1 and names.count("STSM.16.M88.4") == 1, names


def _swizzled(rows: np.ndarray) -> np.ndarray:
    """128-byte rows as the 128-byte swizzle lays them out: piece c of row r at 16 (c ^ r % 8)."""
    out = np.empty_like(rows)
    for r in range(rows.shape[0]):
        for c in range(8):
            out[r, 16 * (c ^ r % 8):16 * (c ^ r % 8) + 16] = rows[r, 16 * c:16 * c + 16]
    return out


def _tile_vt(v: np.ndarray) -> np.ndarray:
    """The V^T tile P V^T reads for key-major V (keys x 128 bytes): row d holds byte d of the keys,
    each 16-key group in slot order (columns past the keys zero)."""
    keys = v.shape[0]
    order = [16 * g + KEY_OF_SLOT[s] for g in range(keys // KEYS) for s in range(KEYS)]
    vt = np.zeros((128, 128), np.uint8)
    vt[:, :keys] = v[order].T
    return vt


@pytest.mark.parametrize("keys", [128, 64, 16])
def test_vt_tile_writes_the_swizzled_slot_order_tile(keys):
    """Four warps (groups 0-3) of emit_vt_tile turn a key-major V tile, swizzled as TMA lands it,
    into the swizzled V^T tile in slot order, and write nothing else."""
    prog = program()
    lane, group, v0, vt0 = prog.regs("u32", 4)
    emit_vt_tile(prog, lane, group, v0, vt0, keys)
    body = render_body(prog)
    rng = np.random.default_rng(keys)
    v = rng.integers(0, 256, (keys, 128), dtype=np.uint8)
    v_base, vt_base = 0, 16384
    mem = np.zeros(vt_base + 128 * 128 + 1024, np.uint8)
    mem[v_base:v_base + keys * 128] = _swizzled(v).ravel()
    for g in range(4):
        Evaluator({str(lane): LANES, str(group): np.full(32, g, np.uint32), str(v0): np.full(32, v_base, np.uint32),
                   str(vt0): np.full(32, vt_base, np.uint32)}, shared=mem).run(body)
    vt = mem[vt_base:vt_base + 128 * 128].reshape(128, 128)
    want = _swizzled(_tile_vt(v))
    written = np.zeros((128, 128), bool)
    for d in range(128):
        for g in range(keys // KEYS):
            written[d, 16 * (g ^ d % 8):16 * (g ^ d % 8) + 16] = True
    assert np.array_equal(vt[written], want[written])
    assert not vt[~written].any() and not mem[keys * 128:vt_base].any() and not mem[vt_base + 128 * 128:].any()


def test_vt_tile_refuses_key_counts_it_cannot_transpose():
    prog = program()
    regs = prog.regs("u32", 4)
    for keys in (0, 24, 144):
        with pytest.raises(ValueError, match="multiple of 16"):
            emit_vt_tile(prog, *regs, keys)


def test_vt_tile_assembles_to_one_matrix_load_and_store_a_block():
    """A 128-key tile's share: 8 blocks, each one LDSM .trans, four PRMTs and one STSM."""
    _assert_matrix_ops_only(lambda prog, lane, group, v0, vt0: emit_vt_tile(prog, lane, group, v0, vt0, 128), 8)


@pytest.mark.parametrize("keys", [128, 16])
def test_vt_tile_kernel_assembles(keys):
    from zyfa.verify.ptx.vt_block import vt_tile_kernel
    name, ptx = vt_tile_kernel(keys)
    assert assemble(ptx, "sm_90a").cubin


@hopper
@pytest.mark.parametrize("keys", [128, 64, 16])
def test_vt_tile_on_the_gpu_is_the_swizzled_slot_order_tile(keys):
    """The tile transposer on the hardware: four warps, both tiles swizzled as the kernels keep
    them; the result unswizzled is V^T with each 16-key group in slot order."""
    from zyfa.verify.ptx.vt_block import vt_tile
    g = torch.Generator("cuda").manual_seed(keys)
    v = torch.randint(0, 256, (keys, 128), dtype=torch.uint8, device="cuda", generator=g)
    vt = vt_tile(v)
    assert np.array_equal(vt.cpu().numpy(), _tile_vt(v.cpu().numpy()))
