"""The generated sm_90a kernel for 16-bit inputs (zyfa.asm.ptx.attention.attention_kernel_16).

On the CPU (CI): a 16-bit A fragment holds the columns of the accumulator fragment (P goes
from S to P V in place), and the kernel assembles for every head dim and type into HGMMA +
TMA with no spills. On an H200: against float64 no further than the Triton kernel on the
same inputs (odd lengths, seqlen_q < seqlen_k, MQA/GQA, one query, non-causal, FP16,
peaked scores); the LSE likewise; repeatable bit for bit; dispatch picks it.
"""
import re

import pytest
import torch

from conftest import describe_mismatch, hopper, rel_err
import zyfa
from zyfa.asm.ptx import attention as attn, consumer, specialized
from zyfa.asm.ptx.assemble import assemble
from zyfa.asm.ptx.fragments import accumulator_position
from zyfa.asm.ptx.layout import SHARED_LIMIT
from zyfa.verify.ptx import sass as sass_code
from zyfa.spec.reference import attention_fp64



def _a16_position(thread: int, reg: int, half: int) -> tuple[int, int]:
    """(row, k) of 16-bit half ``half`` of A-operand register ``reg`` (m64k16, PTX ISA's
    "wgmma register fragments")."""
    warp, lane = divmod(thread, 32)
    g, q = divmod(lane, 4)
    return 16 * warp + g + 8 * (reg % 2), 8 * (reg // 2) + 2 * q + half


def test_16bit_a_fragment_is_the_accumulator_fragment():
    """bf16.py packs accumulator registers 8t + 2r (low half) and 8t + 2r + 1 (high) into A
    register r of P V k-step t: the same row and key, for every thread."""
    for thread in range(128):
        for t in range(attn.BLOCK_N // 16):
            for r in range(4):
                for half in range(2):
                    row, key = accumulator_position(thread, 8 * t + 2 * r + half)
                    a_row, k = _a16_position(thread, r, half)
                    assert (a_row, 16 * t + k) == (row, key)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_generated_packing_puts_each_p_where_the_a_operand_reads_it(dtype):
    """bf16.emit_pack16 as emitted: the word of A register r, k-step t holds in its low half the
    P of accumulator register 8t + 2r and in its high half 8t + 2r + 1, each at the (row, key)
    the 16-bit A fragment reads (rounded to the input type, round to nearest)."""
    import types
    from zyfa.asm.ptx.bf16 import emit_pack16
    from zyfa.asm.ptx.target import program
    prog = program()
    p = prog.regs("f32", attn.BLOCK_N // 2)
    p_regs = [prog.regs("b32", 4) for _ in range(attn.BLOCK_N // 16)]
    emit_pack16(prog, types.SimpleNamespace(layout=types.SimpleNamespace(dtype=dtype)), p, p_regs)
    index = {str(r): i for i, r in enumerate(p)}
    word = {str(w): (t, r) for t, words in enumerate(p_regs) for r, w in enumerate(words)}
    packs = [re.match(rf"\s*cvt\.rn\.{dtype}x2\.f32 (\S+), (\S+), (\S+);", line) for line in prog.body]
    assert len(packs) == attn.BLOCK_N // 4 and all(packs)
    for m in packs:
        t, r = word[m.group(1)]
        for half, src in ((1, m.group(2)), (0, m.group(3))):        # PTX: the first source is the high half
            for thread in (0, 37, 101):
                assert accumulator_position(thread, index[src]) == \
                    (_a16_position(thread, r, half)[0], 16 * t + _a16_position(thread, r, half)[1])


@pytest.mark.parametrize("dims", attn.HEAD_DIMS_16)
@pytest.mark.parametrize("packed", [False, True], ids=["dense", "packed"])
def test_output_staging_overlaps_nothing_in_use(dims, packed):
    """Layout.o_staging: a consumer's 64 output rows go through shared memory no other use
    reads or writes at the epilogue: a dense launch's own Q tile (the CTA's one tile has done
    its last S), else a region of the packed kernel's own past the tile word, inside the
    kernel's shared memory (the producer loads the next tile's Q meanwhile)."""
    layout = attn.layout_for(*dims[:1], "bf16", dims[1], packed)
    rows = attn.BLOCK_M * layout.dv * layout.elem_bytes
    staging = layout.o_staging
    _, ptx = attn.attention_kernel_16("bf16", True, *dims, packed=packed)
    assert ("stmatrix" in ptx) == (staging is not None)
    if staging is None:
        assert packed and layout.shared_bytes + layout.consumers * rows > SHARED_LIMIT - 1024   # no room
        return
    first, stride = staging
    if not packed:
        assert (first, stride) == (0, layout.q_bytes) and rows <= layout.q_bytes
    else:
        assert first >= layout.tile_word_offset + 16 and first % 1024 == 0 and stride == rows
        assert first + layout.consumers * stride + 1024 == layout.shared_bytes <= SHARED_LIMIT


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("dims", attn.HEAD_DIMS_16)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("packed", [False, True], ids=["dense", "packed"])
@pytest.mark.slow
def test_16bit_kernel_assembles_to_hgmma_without_spills(dims, dtype, causal, packed):
    name, ptx = attn.attention_kernel_16(dtype, causal, *dims, packed=packed)
    a = assemble(ptx)
    assert a.spill_bytes == 0, a.report
    sass = a.sass()
    assert "UTMALDG" in sass and "LDL" not in sass and "STL" not in sass
    dqk, dv = dims
    bn = attn.layout_for(dqk, dtype, dv).block_n
    # per key block: Q K^T in k16 steps, P V in block_n / 16 steps (the first block's S and
    # the last block's P V are emitted once more outside the loop)
    assert sass.count(f"HGMMA.64x{bn}x16") >= 2 * (dqk // 16)
    assert sass.count(f"HGMMA.64x{dv}x16") >= 2 * (bn // 16)
    layout = attn.layout_for(dqk, dtype, dv, packed)
    budget = consumer.CONSUMER_REGISTERS[layout.consumers]
    used = max(int(r) for r in re.findall(r"\bR(\d+)\b", sass))
    assert used < budget, f"the consumers' {budget} registers: R{used} used"
    assert f"USETMAXREG.TRY_ALLOC.CTAPOOL UP0, {budget:#x}" in sass
    assert a.registers == specialized.LAUNCH_REGISTERS[layout.consumers]
    assert layout.threads == 128 * (1 + layout.consumers) and layout.threads * a.registers <= 64 * 1024
    assert layout_fits(dims, dtype)
    # the block loop's wgmma descriptors stay in uniform registers: moved there from vector
    # registers a block (R2UR), they measured slower (docs/decisions.md); packed d64
    # moves one Q descriptor
    loop = sass_code.block_loop(sass_code.instructions(sass), dqk // 16 + bn // 16)
    assert sum(i.mnemonic == "R2UR" for i in loop) <= 1, "\n".join(i.text for i in loop)


def test_sass_reader_takes_the_schedule_from_the_control_bits():
    """Each instruction's stall count, scoreboards and wait mask come from its high word's bits
    41-62 (the words below were built with known fields), the block loop is the smallest
    backward branch over enough MMAs, and its static cycles are the stalls summed."""
    def word(stall, write, read, wait):
        return f"{(stall | write << 5 | read << 8 | wait << 11) << 41 | 0xfe0:#018x}"
    lines = [("0000", "MOV R1, c[0x0][0x28]", word(1, 7, 7, 0)),
             ("0010", "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], R24", word(4, 7, 7, 0b000001)),
             ("0020", "MUFU.EX2 R5, R4", word(2, 1, 7, 0)),
             ("0030", "@!P0 BRA 0x10", word(5, 7, 2, 0b000010)),
             ("0040", "BRA 0x0", word(3, 7, 7, 0))]
    sass = "\n".join(f"        /*{a}*/                   {t} ;    /* 0x0000000000000000 */\n"
                     f"                                       /* {w} */" for a, t, w in lines)
    code = sass_code.instructions(sass)
    assert [(i.addr, i.stall, i.write_scoreboard, i.read_scoreboard, i.wait_mask) for i in code] == [
        (0, 1, 7, 7, 0), (0x10, 4, 7, 7, 1), (0x20, 2, 1, 7, 0), (0x30, 5, 7, 2, 2), (0x40, 3, 7, 7, 0)]
    assert [i.mnemonic for i in code] == ["MOV", "HGMMA.64x128x16.F32.BF16", "MUFU.EX2", "BRA", "BRA"]
    loop = sass_code.block_loop(code, 1)
    assert [i.addr for i in loop] == [0x10, 0x20, 0x30] and sass_code.static_cycles(loop) == 11
    with pytest.raises(ValueError):
        sass_code.block_loop(code, 2)


@pytest.mark.parametrize("kernel", ["bf16 d128", "bf16 d64", "fp8 d256"])
def test_packed_persistent_kernels_hand_out_tiles_from_a_counter(kernel):
    """A packed launch's producer takes each next tile from the counter (atomics, its first
    tile its own CTA index) and hands it over in shared memory before loading the Q tiles;
    the consumers read it only after Q has landed; the end is handed over the same way. Dense
    launches keep one CTA a tile (no counter)."""
    dtype, d = kernel.split()
    d = int(d[1:])
    make = ((lambda packed: attn.attention_kernel_16("bf16", True, d, d, packed=packed)) if dtype == "bf16" else
            (lambda packed: attn.attention_kernel("exact", True, d, "sm_90a", packed)))
    assert "atom.global" not in make(False)[1]
    lines = [line.strip() for line in make(True)[1].splitlines()]
    at = {line[:-1]: i for i, line in enumerate(lines) if line.endswith(":")}     # labels
    word_store = [i for i, line in enumerate(lines) if line.startswith("st.shared.b32")]
    q_full = [i for i, line in enumerate(lines) if "mbarrier.arrive.expect_tx" in line]
    atoms = [i for i, line in enumerate(lines) if line.startswith("atom.global.add.u32")]
    assert len(atoms) == 1 and atoms[0] > at["TILE_LOADED"] > at["PRODUCER"]     # the next draw
    order_loads = [i for i, line in enumerate(lines) if line.startswith("@") and "ld.global.nc.u32" in line]
    assert len(order_loads) == 2 and order_loads[1] > atoms[0]                   # first draw, then each next
    assert "PRODUCE_TILE_SKIP" not in at                                          # the order lists no empty tile
    handed = [i for i in word_store if at["PRODUCER"] < i < at["TILE_LOADED"]]
    # the Q tiles' expect_tx follows the word (from a CTA's second tile, key block 0 goes first)
    assert len(handed) == 1 and at["WAIT_Q_FREE"] < handed[0] < min(i for i in q_full if i > at["LOAD_Q"])
    assert at["WAIT_FREE_FIRST"] < at["LOAD_Q"]
    if dtype == "bf16":       # split K / V: K(j) goes out before V(j - 1), V(n - 1) after the loop
        assert at["LOAD_LOOP"] < at["WAIT_FREE"] < at["WAIT_V_FREE"] < at["LAST_V"] < at["WAIT_V_FREE_LAST"] \
            < at["TILE_LOADED"]
        # V's key block and load number are K's less one (registers v_block, v_slot), K's are j and slot
        sub = re.compile(r"sub\.u32 (%u32_\d+), (%u32_\d+), 1;")
        (v_block, j), (v_slot, slot) = (sub.fullmatch(lines[at["LOAD_LOOP"] + k]).groups() for k in (1, 2))
        to_last_v = next(i for i in range(at["LOAD_LOOP"], at["LAST_V"]) if lines[i].endswith("bra LAST_V;"))
        k_part = lines[to_last_v + 1:lines.index(f"add.u32 {j}, {j}, 1;", to_last_v)]
        v_part = lines[lines.index(f"add.u32 {slot}, {slot}, 1;", to_last_v) + 1:lines.index("bra LOAD_LOOP;")]
        last_v = lines[at["LAST_V"]:at["TILE_LOADED"]]

        def regs(part):
            return set(re.findall(r"%u32_\d+", "\n".join(part)))
        assert {j, slot} <= regs(k_part) and not {v_block, v_slot} & regs(k_part)
        for part in (v_part, last_v):
            assert {v_block, v_slot} <= regs(part) and not {j, slot} & regs(part)
        tma = [sum(line.startswith("cp.async.bulk.tensor") for line in part) for part in (k_part, v_part, last_v)]
        assert tma[0] == tma[1] == tma[2] > 0
    # from a CTA's second tile on, the tile's Q boxes are prefetched into L2 before its first stage is waited for
    box = re.compile(r"\[(%u64_\d+), \{(%u32_\d+), (%u32_\d+), %u32_\d+, (%u32_\d+)\}\]")
    prefetch = [i for i, line in enumerate(lines) if line.startswith("cp.async.bulk.prefetch.tensor")]
    q_end = at.get("WAIT_FREE_FIRST_TILE", at["LOAD_LOOP"])     # 16-bit: a CTA's first tile loads K(0) after Q
    q_loads = [i for i in range(at["LOAD_Q"], q_end) if lines[i].startswith("cp.async.bulk.tensor")]
    assert prefetch and all(at["PRODUCE_TILE"] < i < at["WAIT_FREE_FIRST"] for i in prefetch)
    assert [box.search(lines[i]).groups() for i in prefetch] == [box.search(lines[i]).groups() for i in q_loads]
    assert "prefetch" not in make(False)[1]
    end = [i for i in word_store if i > at["PRODUCE_TILE_DONE"]]
    assert len(end) == 1 and lines[end[0] + 1].startswith("mbarrier.arrive.shared")
    # the tile read by lane 0 alone (the lane that arrives on q_free: no other lane's read races the
    # producer's next write), passed to the warp, then its end test; no other read of the word
    lanes = {m[1] for m in (re.fullmatch(r"and\.b32 (%\w+), %\w+, 31;", ln) for ln in lines) if m}
    lane0 = {m[1] for m in (re.fullmatch(r"setp\.eq\.u32 (%\w+), (%\w+), 0;", ln) for ln in lines) if m and m[2] in lanes}
    word_load = [i for i, line in enumerate(lines[:at["PRODUCER"]])
                 if re.fullmatch(r"@%\w+ ld\.shared\.b32 %\w+, \[%\w+\];", line)
                 and lines[i + 1].startswith("shfl.sync.idx.b32") and lines[i + 2].startswith("setp.ge.u32")]
    words = {re.search(r"\[(%\w+)\]", lines[i])[1] for i in word_load}
    reads = [i for i, line in enumerate(lines[:at["PRODUCER"]]) if "ld.shared" in line
             and any(f"[{w}]" in line for w in words)]
    assert word_load and reads == word_load
    assert lane0 and all(lines[i].split()[0][1:] in lane0 for i in word_load)
    waits = [at[name] for name in at if name.startswith("WAIT_Q") and at[name] < at["PRODUCER"]]
    assert word_load and all(any(0 < i - w < 8 for w in waits) for i in word_load)    # each right after a Q wait


@pytest.mark.parametrize("lengths", ["mixed", "equal"])
@pytest.mark.parametrize("kernel", ["bf16 d128", "bf16 d64", "fp8 d256"])
def test_tile_order_lists_each_nonempty_tile_once_sequence_by_sequence(kernel, lengths):
    """The host's order for a packed launch (kernels._tile_order), decoded the way the
    producer and tile_loop.TileLoop do, names every (sequence, query tile, head) that has
    queries exactly once and none past a sequence's queries: the sequences most keys first,
    in each one head after head, each head's query tiles last first; the last
    kernels.TAIL_PER_SM tiles an SM re-sorted most keys first (16-bit: TAIL_PER_SM_EQUAL when
    every sequence has the same lengths, a dense call's route)."""
    import zyfa.asm.ptx.kernels as K
    from zyfa.asm.ptx.kernels import _tile_order
    from zyfa.spec.shapes import Packed
    dtype, d = kernel.split()
    layout = attn.layout_for(int(d[1:]), "e4m3" if dtype == "fp8" else dtype, int(d[1:]), True)
    rows, heads = layout.consumers * attn.BLOCK_M, 3
    q_lens, k_lens = [1, 700, 0, 129, 2 * rows, 50], [1, 900, 5, 129, 2 * rows, 40]
    if lengths == "equal":
        q_lens, k_lens = [3 * rows + 5] * 4, [4 * rows] * 4
    max_q = max(q_lens) + rows                               # max_seqlen_q may exceed every length
    none = torch.zeros(len(q_lens), dtype=torch.int32)
    packed = Packed(none, none, none, none, max_q, max(k_lens), lengths=(tuple(q_lens), tuple(k_lens)))
    sms = 2
    words, draws = _tile_order(layout, packed, heads, torch.device("cpu"), sms)
    assert words[0] == 0 and len(words) == 1 + draws
    per_head, heads_batch = -(-max_q // rows), heads * len(q_lens)
    seen = []
    for d in range(draws):                                   # tile_loop._emit_tile_of_draw, then TileLoop
        t = int(words[1 + d])
        tile, (seq, head) = per_head - 1 - t // heads_batch, divmod(t % heads_batch, heads)
        seen.append((seq, head, tile))
    expected = [(s, h, m) for s in sorted(range(len(q_lens)), key=lambda s: -k_lens[s])
                for h in range(heads) for m in reversed(range(-(-q_lens[s] // rows)))]
    tail = (K.TAIL_PER_SM_EQUAL if lengths == "equal" and dtype != "fp8" else K.TAIL_PER_SM) * sms
    assert 0 < tail < len(expected)
    keys = {t: min(k_lens[t[0]], max(0, k_lens[t[0]] - q_lens[t[0]]) + (t[2] + 1) * rows) for t in expected}
    expected[-tail:] = sorted(expected[-tail:], key=lambda t: -keys[t])      # stable: ties keep their order
    assert seen == expected
    assert [keys[t] for t in seen[-tail:]] == sorted((keys[t] for t in seen[-tail:]), reverse=True)


def test_tile_order_leaves_out_the_sequences_written_elsewhere():
    """A mixed batch's decode sequences (Packed.written_elsewhere: the decode kernel writes
    their rows after the launch) get no tile in the packed launch's order; every other
    sequence's tiles are drawn once each, as without them."""
    from zyfa.asm.ptx.kernels import _tile_order
    from zyfa.spec.shapes import Packed
    layout = attn.layout_for(128, "bf16", 128, True)
    rows, heads, sms = layout.consumers * attn.BLOCK_M, 4, 2
    q_lens, k_lens = (1, 3 * rows, 16, 2 * rows + 7, 1), (900, 3 * rows, 4000, 2 * rows + 7, 5)
    none = torch.zeros(len(q_lens), dtype=torch.int32)
    per_head, heads_batch = -(-max(q_lens) // rows), heads * len(q_lens)

    def drawn(elsewhere):
        packed = Packed(none, none, none, none, max(q_lens), max(k_lens), lengths=(q_lens, k_lens),
                        written_elsewhere=elsewhere)
        words, draws = _tile_order(layout, packed, heads, torch.device("cpu"), sms)
        return [(divmod(int(t) % heads_batch, heads), per_head - 1 - int(t) // heads_batch) for t in words[1:1 + draws]]

    every = drawn(())
    left = drawn((0, 2, 4))
    assert {seq for (seq, _), _ in every} == {0, 1, 2, 3, 4}
    assert sorted(left) == sorted(t for t in every if t[0][0] in (1, 3))
    assert len(left) == len(set(left)) == heads * (3 + 3)


def layout_fits(dims, dtype) -> bool:
    """Two stages of K and V and every consumer's Q tiles fit the SM's 227 KB."""
    return attn.layout_for(dims[0], dtype, dims[1]).shared_bytes <= 227 * 1024


def test_tma_descriptors_are_encoded_once_per_address_shape_strides_and_box(monkeypatch):
    """loader.tensor_map keeps each descriptor (it holds only the address, shape, strides, box
    and swizzle): the same tensor again costs no encode, any other of these a new one, and a
    tensor TMA cannot read still raises. The driver is a stand-in (no GPU here)."""
    import types
    from zyfa.asm.ptx import loader
    encoded = []
    drv = types.SimpleNamespace(
        CUresult=types.SimpleNamespace(CUDA_SUCCESS=0), cuuint64_t=int, cuuint32_t=int,
        CUtensorMapSwizzle=types.SimpleNamespace(CU_TENSOR_MAP_SWIZZLE_128B=3, CU_TENSOR_MAP_SWIZZLE_64B=2,
                                                 CU_TENSOR_MAP_SWIZZLE_NONE=0),
        CUtensorMapDataType=types.SimpleNamespace(CU_TENSOR_MAP_DATA_TYPE_UINT8=0),
        CUtensorMapInterleave=types.SimpleNamespace(CU_TENSOR_MAP_INTERLEAVE_NONE=0),
        CUtensorMapL2promotion=types.SimpleNamespace(CU_TENSOR_MAP_L2_PROMOTION_L2_128B=2),
        CUtensorMapFloatOOBfill=types.SimpleNamespace(CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE=0),
        cuTensorMapEncodeTiled=lambda *a: (encoded.append(a), (0, object()))[1])
    monkeypatch.setattr(loader, "_driver", lambda: drv)
    loader._encoded_map.cache_clear()
    try:
        x = torch.zeros(2, 256, 4, 128, dtype=torch.uint8)
        first = loader.tensor_map(x, (1, 64, 1, 128))
        assert loader.tensor_map(x, (1, 64, 1, 128)) is first and len(encoded) == 1
        y = x[:, :128]                                              # same address, other shape
        assert loader.tensor_map(y, (1, 64, 1, 128)) is not first and len(encoded) == 2
        assert loader.tensor_map(x, (1, 128, 1, 128)) is not first and len(encoded) == 3   # other box
        assert loader.tensor_map(x, (1, 64, 1, 128), 64) is not first and len(encoded) == 4  # other swizzle
        assert encoded[0][2] == x.data_ptr() and encoded[0][3] == [128, 4, 256, 2]
        with pytest.raises(ValueError, match="innermost contiguous"):
            loader.tensor_map(x.transpose(2, 3), (1, 64, 128, 1))
    finally:
        loader._encoded_map.cache_clear()


def test_16bit_kernel_refuses_what_it_does_not_implement():
    with pytest.raises(ValueError, match="head dims"):
        attn.attention_kernel_16("bf16", True, 96, 96)
    with pytest.raises(ValueError, match="bf16 or f16"):
        attn.attention_kernel_16("e4m3", True, 128, 128)


def _inputs(B, Sq, Sk, Hq, Hkv, D, Dv, dtype=torch.bfloat16, seed=0, scale=1.0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = (torch.randn(B, Sq, Hq, D, device="cuda", generator=g) * scale).to(dtype)
    k = (torch.randn(B, Sk, Hkv, D, device="cuda", generator=g) * scale).to(dtype)
    v = torch.randn(B, Sk, Hkv, Dv, device="cuda", generator=g).to(dtype)
    return q, k, v


SHAPES = [  # B, Sq, Sk, Hq, Hkv, D, Dv, causal
    (1, 300, 300, 4, 4, 128, 128, True), (2, 1000, 1000, 8, 2, 128, 128, True),
    (1, 77, 513, 4, 1, 128, 128, True), (1, 1, 100, 4, 2, 128, 128, True),
    (1, 513, 700, 4, 2, 128, 128, False), (1, 128, 128, 2, 2, 128, 128, True),
    (1, 333, 333, 4, 2, 64, 64, True), (1, 333, 400, 4, 4, 192, 128, True),
    (1, 200, 1000, 2, 1, 64, 64, False), (2, 129, 129, 16, 16, 192, 128, False),
    (1, 333, 333, 4, 2, 256, 256, True), (1, 100, 257, 2, 1, 256, 256, False),
    (2, 577, 900, 6, 3, 64, 64, True)]          # d64's 192-row tiles: three and a row, Sq < Sk


def _assert_as_close_as_triton(q, k, v, causal, softmax_scale=None, window=(-1, -1)):
    out, lse = zyfa.flash_attn_func(q, k, v, causal=causal, softmax_scale=softmax_scale, return_lse=True,
                                    backend="ptx", window_size=window)
    tri, lse_tri = zyfa.flash_attn_func(q, k, v, causal=causal, softmax_scale=softmax_scale, return_lse=True,
                                        backend="triton", window_size=window)
    ref, lse_ref = attention_fp64(q, k, v, causal=causal, softmax_scale=softmax_scale, return_lse=True,
                                  window_size=window)
    assert out.dtype == q.dtype and torch.isfinite(out).all()
    # the yardstick: the Triton kernel's error on the same inputs (P and out rounded to the
    # input type dominate both)
    err, err_tri = rel_err(out, ref), rel_err(tri, ref)
    print(f"{tuple(q.shape)} {q.dtype}: ptx {err:.3e} triton {err_tri:.3e}")
    assert err <= 1.25 * err_tri + 1e-5, (err, err_tri, describe_mismatch(out, ref.to(out.dtype)))
    lse_err = (lse.double() - lse_ref).abs().max().item()
    lse_err_tri = (lse_tri.double() - lse_ref).abs().max().item()
    assert lse_err <= 2 * lse_err_tri + 1e-5, (lse_err, lse_err_tri)


@hopper
@pytest.mark.parametrize("shape", SHAPES)
def test_16bit_kernel_vs_float64_and_triton(shape):
    *dims, causal = shape
    _assert_as_close_as_triton(*_inputs(*dims, seed=sum(dims)), causal)


@hopper
@pytest.mark.parametrize("shape", [SHAPES[1], SHAPES[6], SHAPES[7]])
def test_16bit_kernel_fp16(shape):
    *dims, causal = shape
    _assert_as_close_as_triton(*_inputs(*dims, dtype=torch.float16, seed=3), causal)


@hopper
def test_16bit_kernel_peaked_scores():
    """Large logits: references that move block to block, rows dominated by a few keys."""
    q, k, v = _inputs(1, 700, 700, 4, 2, 128, 128, seed=7, scale=4.0)
    _assert_as_close_as_triton(q, k, v, True)
    _assert_as_close_as_triton(q, k, v, True, softmax_scale=0.3)


@hopper
def test_16bit_kernel_repeatable_and_every_element_written():
    q, k, v = _inputs(2, 333, 333, 4, 1, 128, 128, seed=11)
    a = zyfa.flash_attn_func(q, k, v, causal=True, backend="ptx")
    torch.full((1 << 24,), float("nan"), device="cuda")   # poison the allocator's free memory
    b = zyfa.flash_attn_func(q, k, v, causal=True, backend="ptx")
    assert torch.isfinite(b).all()
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))


def test_short_dense_batches_as_packed_tables():
    """A dense batch's packed description: B sequences of Sq queries and Sk keys, k and v
    sharing their starts; (B, S, H, D) flattened to one sequence of tokens without a copy
    where the strides allow, else None (the dense kernel runs)."""
    from zyfa.asm.ptx.kernels import _flat, _uniform_batch
    p = _uniform_batch(3, 5, 7, torch.device("cpu"))
    assert p.cu_q.tolist() == [0, 5, 10, 15] and p.k_start.tolist() == [0, 7, 14] == p.v_start.tolist()
    assert p.k_len.tolist() == [7, 7, 7] and (p.max_seqlen_q, p.max_seqlen_k, p.batch) == (5, 7, 3)
    assert p.host_lengths() == ((5, 5, 5), (7, 7, 7))
    x = torch.arange(2 * 3 * 4 * 8.0).view(2, 3, 4, 8)
    assert _flat(x).shape == (1, 6, 4, 8) and _flat(x).data_ptr() == x.data_ptr()
    assert _flat(x.transpose(1, 2).contiguous().transpose(1, 2)) is None      # (B, H, S, D) storage
    assert _flat(x[:1].transpose(1, 2).contiguous().transpose(1, 2)) is not None


@hopper
@pytest.mark.parametrize("shape", [  # B, Sq, Sk, Hq, Hkv, D, Dv, causal, dtype
    (3, 1000, 1000, 8, 2, 128, 128, True, torch.bfloat16), (4, 300, 1024, 4, 4, 64, 64, True, torch.bfloat16),
    (2, 513, 700, 4, 1, 128, 128, False, torch.float16), (5, 129, 129, 16, 16, 192, 128, True, torch.bfloat16),
    (2, 2048, 2048, 4, 2, 128, 128, True, torch.bfloat16), (3, 1, 77, 4, 2, 64, 64, True, torch.bfloat16),
    # tiles far past the SM count: every CTA runs many in a row (the next tile's loads go first)
    (16, 1024, 1024, 16, 4, 128, 128, True, torch.bfloat16), (32, 512, 512, 8, 8, 64, 64, True, torch.bfloat16),
    # one sequence, long (d128 routes up to 8K keys), d64, MLA and d256 at their limits
    (1, 8191, 8192, 8, 2, 128, 128, True, torch.bfloat16), (2, 2048, 2048, 4, 4, 64, 64, False, torch.float16),
    (1, 4096, 4096, 4, 2, 64, 64, True, torch.bfloat16),
    (2, 3000, 4096, 4, 2, 192, 128, True, torch.bfloat16), (2, 4096, 4096, 4, 2, 256, 256, True, torch.bfloat16),
    (3, 333, 500, 4, 4, 256, 256, False, torch.float16),
    # Sk - Sq = 100: a tile's two consumers reach the masked band one block apart, so the dense
    # d128 kernel's consumers leave the loop's copy below the band at different blocks while
    # they take turns (Layout.turns)
    (2, 700, 800, 4, 2, 128, 128, True, torch.bfloat16)])
def test_dense_calls_on_the_packed_kernel_equal_the_dense_kernel(shape, monkeypatch):
    """kernels.PACKED_ROUTE_KEYS: a dense call with at most that many keys runs the packed
    kernel over equal sequences; same tiles, same key blocks in the same order, so out and lse
    equal the dense kernel's bit for bit (odd lengths, Sq < Sk, GQA, non-causal, FP16, one
    query, one sequence, CTAs that run many tiles). Up to Dqk 192 the dense kernel waits for
    P V early and rescales before it (Layout.early_pv_wait), the packed one does not: the same
    products in another order, so also those must agree bit for bit."""
    import zyfa.asm.ptx.kernels as K
    *dims, causal, dtype = shape
    q, k, v = _inputs(*dims, dtype=dtype, seed=sum(dims))
    assert k.shape[1] <= K.PACKED_ROUTE_KEYS[q.shape[-1]]
    out, lse = K.attention_16(q, k, v, None, causal)
    monkeypatch.setattr(K, "PACKED_ROUTE_KEYS", {})
    ref, lse_ref = K.attention_16(q, k, v, None, causal)
    assert out.shape == ref.shape and lse.shape == lse_ref.shape and lse.is_contiguous()
    assert torch.equal(out.view(torch.int16), ref.view(torch.int16)), describe_mismatch(out, ref)
    assert torch.equal(lse, lse_ref)
    # (B, H, S, D) storage cannot be flattened without a copy: the dense kernel takes it
    qt, kt, vt = (x.transpose(1, 2).contiguous().transpose(1, 2) for x in (q, k, v))
    monkeypatch.undo()
    assert torch.equal(K.attention_16(qt, kt, vt, None, causal)[0].view(torch.int16), ref.view(torch.int16))


@hopper
def test_routed_calls_on_several_streams_keep_their_own_tile_counters():
    """A packed launch counts its drawn tiles in a device word that a stream's launches share
    (kernels._order_on_device, zeroed before each launch): calls racing on two streams and
    calls back to back on one must each draw every tile once, so all equal the first bit for bit."""
    q, k, v = _inputs(8, 1000, 1000, 8, 2, 128, 128, seed=5)
    first = zyfa.flash_attn_func(q, k, v, causal=True, backend="ptx").clone()
    streams = [torch.cuda.Stream() for _ in range(2)]
    outs = []
    torch.cuda.synchronize()
    for _ in range(4):
        for s in streams:
            with torch.cuda.stream(s):
                outs.append(zyfa.flash_attn_func(q, k, v, causal=True, backend="ptx"))
    torch.cuda.synchronize()
    for out in outs:
        assert torch.equal(out.view(torch.int16), first.view(torch.int16)), describe_mismatch(out, first)


@hopper
def test_dispatch_selects_ptx_for_16bit_head_dims_it_takes():
    for D, Dv in attn.HEAD_DIMS_16:
        q, k, v = _inputs(1, 64, 64, 4, 2, D, Dv)
        assert zyfa.explain(q, k, v, causal=True).startswith("selected: ptx")


_TRITON_DOT = """
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget

@triton.jit
def dot(A, B, C):
    r, c, kk = tl.arange(0, 64), tl.arange(0, 128), tl.arange(0, 128)
    a = tl.load(A + r[:, None] * 128 + kk[None, :])
    b = tl.load(B + kk[:, None] * 128 + c[None, :])
    tl.store(C + r[:, None] * 128 + c[None, :], tl.dot(a, b))

src = triton.compiler.ASTSource(fn=dot, signature={"A": "*bf16", "B": "*bf16", "C": "*fp32"}, constexprs={})
print(triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4)).asm["ptx"])
"""


def test_descriptors_match_what_triton_writes_for_the_same_operands(tmp_path):
    """The 16-bit kernel's wgmma descriptors, against Triton 3.6's for the same operands,
    compiled on the CPU (in its own process: the interpreter's kernels cannot be compiled): a
    64 x 128 by 128 x 128 BF16 dot whose A is K-major (as Q and K are for Q K^T) and B row-major,
    MN-major (as V is for P V). The same base bits (swizzle, leading and stride byte offsets)
    and the same steps along K (2 for A's 32 bytes, 128 for B's 16 rows)."""
    import os
    import subprocess
    import sys
    from zyfa.asm.ptx.layout import COLUMN_TILE
    from zyfa.asm.ptx.target import SWIZZLE_128B, descriptor_bits
    script = tmp_path / "dot.py"
    script.write_text(_TRITON_DOT)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    ptx = r.stdout
    k_major = descriptor_bits(8 * COLUMN_TILE, SWIZZLE_128B)
    mn_major = descriptor_bits(8 * COLUMN_TILE, SWIZZLE_128B, leading_bytes=attn.BLOCK_N * COLUMN_TILE)
    consts = {int(x) for x in re.findall(r"or\.b64\s+%rd\d+, %rd\d+, (\d+);", ptx)}
    assert {k_major, mn_major} <= consts, (hex(k_major), hex(mn_major), [hex(c) for c in consts])
    adds = {int(x) for x in re.findall(r"add\.s64\s+%rd\d+, %rd\d+, (\d+);", ptx)}
    assert {k_major + 2, k_major + 4, k_major + 6} <= adds and {mn_major + 128 * t for t in (1, 2, 3)} <= adds
    ours = attn.attention_kernel_16("bf16", True, 128, 128)[1]
    for bits in (k_major, mn_major):
        assert f", {bits};" in ours, hex(bits)
    assert all(f", {128 * t};" in ours for t in range(1, attn.BLOCK_N // 16))


WINDOWS_16 = [  # (window_size, causal): the 128-key block's edges (d256: 64-key blocks), past the sequence
    ((0, 0), True), ((1, 0), True), ((63, 0), True), ((127, 0), True), ((128, 0), True), ((129, 0), True),
    ((5000, 0), True), ((0, 0), False), ((128, 129), False), ((-1, 1), False), ((129, -1), False)]


@hopper
@pytest.mark.parametrize("routed", [True, False], ids=["packed-route", "dense"])
@pytest.mark.parametrize("dims", [(128, 128), (64, 64), (192, 128), (256, 256)], ids=lambda d: f"d{d[0]}-{d[1]}")
@pytest.mark.parametrize("window", WINDOWS_16, ids=lambda w: f"{w[0][0]}_{w[0][1]}_{'causal' if w[1] else 'full'}")
def test_16bit_windowed_kernel_vs_float64_and_triton(window, dims, routed, monkeypatch):
    """The windowed 16-bit kernels, dense and on the packed route (short dense calls), against
    float64 under the window, as close as the Triton kernel's windowed path."""
    import zyfa.asm.ptx.kernels as K
    if not routed:
        monkeypatch.setattr(K, "PACKED_ROUTE_KEYS", {})
    window, causal = window
    q, k, v = _inputs(2, 700, 900, 4, 2, *dims, seed=dims[0] + max(window[0], 0))
    text = zyfa.explain(q, k, v, causal=causal, window_size=window)
    assert text.startswith("selected: ptx") and "sliding window" in text, text
    _assert_as_close_as_triton(q, k, v, causal, window=window)


@hopper
@pytest.mark.parametrize("dims", [(128, 128), (64, 64), (192, 128), (256, 256)], ids=lambda d: f"d{d[0]}-{d[1]}")
@pytest.mark.parametrize("window,causal", [((0, 0), True), ((129, 0), True), ((127, 128), False)])
@pytest.mark.parametrize("page_size", [0, 64])
def test_16bit_windowed_packed_and_paged_equal_per_sequence_calls(dims, window, causal, page_size, monkeypatch):
    """A packed batch and its paged cache with a window, one launch: bit for bit the windowed
    kernel a sequence (each run as a packed batch of one, the short dense route)."""
    import itertools
    from zyfa.varlen import paged_kv_cache
    lens_q, lens_k = [1, 200, 77, 130, 400], [5, 260, 77, 300, 400]
    g = torch.Generator().manual_seed(dims[0] + page_size)
    q = torch.randn(sum(lens_q), 4, dims[0], generator=g).bfloat16().cuda()
    k = torch.randn(sum(lens_k), 2, dims[0], generator=g).bfloat16().cuda()
    v = torch.randn(sum(lens_k), 2, dims[1], generator=g).bfloat16().cuda()
    cu_q, cu_k = (torch.tensor([0] + list(itertools.accumulate(n)), dtype=torch.int32) for n in (lens_q, lens_k))
    kv, extra = (k, v), dict(cu_seqlens_k=cu_k)
    if page_size:
        kp, vp, table, used = paged_kv_cache(k, v, cu_k, page_size, seed=page_size)
        kv, extra = (kp, vp), dict(cu_seqlens_k=None, block_table=table, seqused_k=used)
    out, lse = zyfa.flash_attn_varlen_func(q, *kv, cu_q, max_seqlen_q=max(lens_q), max_seqlen_k=max(lens_k),
                                           causal=causal, window_size=window, return_lse=True, backend="ptx", **extra)
    for i, (a, c) in enumerate(zip(cu_q[:-1].tolist(), cu_k[:-1].tolist())):
        sq, sk = lens_q[i], lens_k[i]
        o, s_ = zyfa.flash_attn_func(q[None, a:a + sq], k[None, c:c + sk], v[None, c:c + sk], causal=causal,
                                     window_size=window, return_lse=True, backend="ptx")
        assert torch.equal(out[a:a + sq].view(torch.int16), o[0].view(torch.int16)), (i, describe_mismatch(out[a:a + sq], o[0]))
        assert torch.equal(lse[:, a:a + sq], s_[0]), i
