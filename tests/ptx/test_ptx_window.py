"""Sliding windows in the generated Hopper kernels (zyfa.asm.ptx.window), on the CPU: the
emitted PTX of a tile's key-block range, each warpgroup's band bounds and the two-edge mask run
in zyfa.verify.ptx.evaluate against zyfa.spec.reference.key_limits at window sizes on block
edges, and every windowed specialization assembled with ptxas (no spill in its block loops).
Their outputs against the spec and float64 on an H100: the GPU tests of test_ptx_attention.py,
test_ptx_16bit.py and test_ptx_int8.py (the ``window`` ones)."""
import re
import types

import numpy as np
import pytest

from zyfa.asm.ptx import attention as attn
from zyfa.asm.ptx.assemble import assemble
from zyfa.asm.ptx.cta import Tile
from zyfa.asm.ptx.fragments import acc_column, acc_row_half
from zyfa.asm.ptx.int8_qk import MASKED_SCORE
from zyfa.asm.ptx.kernels import UNBOUNDED_SLACK, window_args
from zyfa.asm.ptx.layout import BLOCK_M, BLOCK_N, params_for
from zyfa.asm.ptx.scores import masked_move
from zyfa.asm.ptx.target import program
from zyfa.asm.ptx.window import Window, emit_band_test, emit_block_range, emit_row_window, emit_window_mask
from zyfa.spec.key_order import KEY_OF_SLOT
from zyfa.spec.reference import key_limits
from zyfa.validation import check_window
from zyfa.verify.ptx import evaluate as EV

WINDOWS = [0, 1, 62, 126, 127, 128, 129, 1000, -1]   # block edges (62, 126: a 64-row tile short of one), beyond, unbounded

S_REGS = BLOCK_N // 2          # a 128-key block's S registers a thread
SLOT_OF_COLUMN = np.array([KEY_OF_SLOT.index(c) for c in range(16)])   # K's rows in slot order: column -> key


def _keys(columns, slot_keys: bool):
    """The keys accumulator ``columns`` hold (block-relative): the columns themselves, or with
    K's rows in slot order the slot each column feeds (key_order.slot_order_rows)."""
    return columns // 16 * 16 + SLOT_OF_COLUMN[columns % 16] if slot_keys else columns


def _program(block_n: int, cta_rows: int, slot_keys: bool):
    """The window's PTX for one warpgroup's thread and one key block: the tile's block range
    (emit_block_range), the rows' bounds (emit_row_window), the band test and the mask of
    zero scores (``slot_keys``: S's columns holding keys in P's slot order, Layout.slot_keys);
    returns (prog, named registers)."""
    prog = program()
    r = {n: prog.reg("u32") for n in ("diag", "full_end", "last_key", "tile_m", "start_m", "n_blocks", "seqlen_k",
                                       "q", "start_n", "first_block", "row0", "row1", "lim0", "lim1", "band_start")}
    t = Tile(False, r["q"], r["diag"], r["full_end"], r["last_key"], r["q"], r["q"], r["q"], r["q"], r["tile_m"],
             r["start_m"], r["n_blocks"], block_n, None, Window(r["first_block"]))
    emit_block_range(prog, t, r["seqlen_k"], cta_rows)
    first, left_end = emit_row_window(prog, t, [r["row0"], r["row1"]], [r["lim0"], r["lim1"]], r["band_start"], None)
    rows = types.SimpleNamespace(limits=[r["lim0"], r["lim1"]], first=first, left_end=left_end,
                                 band_start=r["band_start"])
    band = prog.reg("pred")
    emit_band_test(prog, rows, r["start_n"], band)
    s = prog.regs("f32", S_REGS)
    for si in s:
        prog.emit("mov.f32", si, "0f00000000")
    cta = types.SimpleNamespace(thread=types.SimpleNamespace(q=r["q"]), layout=types.SimpleNamespace(slot_keys=slot_keys))
    emit_window_mask(prog, cta, rows, s, r["start_n"], masked_move(False))
    return prog, r, dict(first=first, left_end=left_end, band=band, s=s)


def _run(Sq, Sk, window, causal, block_n, cta_rows, slot_keys):
    """Every (tile, warpgroup, thread, key block) of the launch as one lane."""
    tiles = np.arange(0, Sq, cta_rows)
    wgs = np.arange(cta_rows // BLOCK_M)
    threads = np.arange(128)
    blocks = np.arange(-(-Sk // block_n))
    T, W, H, J = np.meshgrid(tiles, wgs, threads, blocks, indexing="ij")
    T, W, H, J = (x.ravel() for x in (T, W, H, J))
    warp, lane = H // 32, H % 32
    start_m = T + BLOCK_M * W
    row0 = start_m + 16 * warp + lane // 4
    u = lambda x: np.asarray(x, np.int64).astype(np.uint32)  # noqa: E731
    prog, r, out = _program(block_n, cta_rows, slot_keys)
    lw, rw = (int(a.value) for a in window_args(window, causal, Sq, Sk))
    regs = {r["diag"]: Sk - Sq, r["full_end"]: Sk // block_n * block_n, r["last_key"]: Sk - 1, r["tile_m"]: T,
            r["start_m"]: start_m, r["seqlen_k"]: Sk, r["q"]: lane % 4, r["start_n"]: J * block_n,
            r["row0"]: row0, r["row1"]: row0 + 8, "window_left": lw, "window_right": rw}
    ev = EV.Evaluator({str(k): u(np.broadcast_to(v, T.shape)) for k, v in regs.items()})
    ev.run(EV.render_body(prog))
    val = lambda reg: ev.regs[str(reg)].astype(np.int64)  # noqa: E731
    sgn = lambda reg: np.where(val(reg) >= 2 ** 31, val(reg) - 2 ** 32, val(reg))  # noqa: E731
    return dict(T=T, W=W, J=J, q=lane % 4, row0=row0, first_block=val(r["first_block"]),
                n_blocks=sgn(r["n_blocks"]), band_start=val(r["band_start"]), left_end=val(out["left_end"]),
                band=val(out["band"]), masked=np.stack([ev.regs[str(s)] == 0xFF800000 for s in out["s"]]))


@pytest.mark.parametrize("block_n,cta_rows,slot_keys", [(128, 64, False), (128, 128, False), (64, 128, False),
                                                        (128, 192, False), (128, 64, True), (128, 128, True)])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("Sq,Sk", [(200, 200), (70, 333), (300, 1100), (1, 129)])
def test_window_bounds_and_mask_follow_the_spec(Sq, Sk, causal, block_n, cta_rows, slot_keys):
    """For every lane: the tile reads exactly the blocks its rows see (from the first row's
    first key to the last row's last key), the mask leaves exactly the keys key_limits gives a
    row (K's rows in slot order: the key each register holds there), and a block the loops run
    unmasked (the band test false) needs no mask for any of the warpgroup's 64 rows. Rows past
    seqlen_q follow the same formula (their output is not stored)."""
    for left in WINDOWS:
        for right in ([0] if causal else WINDOWS):
            try:
                c, window = check_window((left, right), causal, Sq, Sk)
            except ValueError:                              # a row that would see no key
                continue
            if window == (-1, -1):
                continue
            x = _run(Sq, Sk, window, c, block_n, cta_rows, slot_keys)
            o, (lw, rw) = Sk - Sq, (a.value for a in window_args(window, c, Sq, Sk))

            def limits(rows):
                return np.maximum(rows + o - lw, 0), np.minimum(rows + o + rw, Sk - 1)
            first, last = key_limits(Sq, Sk, c, window)
            assert (first.numpy() == limits(np.arange(Sq))[0]).all() and (last.numpy() == limits(np.arange(Sq))[1]).all()
            lo_tile = limits(x["T"])[0] // block_n
            hi_tile = np.minimum(x["T"] + cta_rows - 1 + o + rw, Sk - 1) // block_n
            case = (Sq, Sk, window, c, block_n, cta_rows, slot_keys)
            assert (x["first_block"] == lo_tile).all() and (x["n_blocks"] == hi_tile - lo_tile + 1).all(), case
            columns = np.array([acc_column(i) for i in range(S_REGS)])[:, None] + 2 * x["q"]
            keys = x["J"][None] * block_n + _keys(columns, slot_keys)
            rows = x["row0"][None] + 8 * np.array([acc_row_half(i) for i in range(S_REGS)])[:, None]
            lo, hi = limits(rows)
            want = (keys < lo) | (keys > hi)
            assert (x["masked"] == want).all(), (case, np.argwhere(x["masked"] != want)[:3])
            # unmasked blocks: every row of the warpgroup (start_m .. + 63) sees every key
            start_m = x["T"] + BLOCK_M * x["W"]
            free = x["band"] == 0
            lo_all = limits(start_m + BLOCK_M - 1)[0]
            hi_all = limits(start_m)[1]
            assert ((x["J"][free] * block_n >= lo_all[free]) & ((x["J"][free] + 1) * block_n - 1 <= hi_all[free])).all(), case


VARIANTS = [dict(dqk=d, **extra) for d in (64, 128, 192, 256)
            for extra in (dict(), dict(packed=True), dict(int8_qk=True), dict(ref_rule="running"))] + \
           [dict(dqk=128, long=True), dict(dqk=128, long=True, ref_rule="running")]


@pytest.mark.parametrize("rule", ["exact"] + [pytest.param(r, marks=pytest.mark.slow) for r in ("lean_cubic_f16",
                                                                                               "lean_cubic")])
@pytest.mark.parametrize("kw", VARIANTS, ids=lambda kw: "-".join(f"{k}{v}" for k, v in kw.items()))
def test_windowed_fp8_kernels_assemble(kw, rule):
    """Each windowed FP8 / INT8 specialization: its own name and window parameters, the default
    kernel's wgmmas (the loops' two copies, no third), within the register budget with no
    spill inside its block loops (_no_spill_in_loop). (MLA's fast mode takes
    wide key blocks without a window: its wgmmas are counted against a lean rule's 128-key kernel.)"""
    name, ptx = attn.attention_kernel(rule, True, window=True, **kw)
    default_name, default_ptx = attn.attention_kernel(rule, True, **kw)
    if attn.wide_blocks(rule, kw.get("ref_rule", "block"), False) and kw["dqk"] in attn.WIDE_KEYS:
        default_ptx = attn.attention_kernel("lean_cubic", True, **kw)[1]     # the same schedule at 128 keys
    assert name.replace("_window", "_causal") == default_name and "window_left" in ptx
    assert "window_left" not in default_ptx
    a, d = assemble(ptx), assemble(default_ptx)
    sass, dsass = a.sass(), d.sass()
    assert sass.count("QGMMA") == dsass.count("QGMMA") and sass.count("HGMMA") == dsass.count("HGMMA")
    assert "serialized" not in a.report and a.registers <= max(d.registers, attn.REGISTER_BUDGET), a.report
    _no_spill_in_loop(sass)


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("dqk,dv", attn.HEAD_DIMS_16)
def test_windowed_16bit_kernels_assemble(dqk, dv, dtype, packed):
    name, ptx = attn.attention_kernel_16(dtype, False, dqk, dv, packed=packed, window=True)
    assert name == attn.kernel_name_16(dtype, False, dqk, dv, packed, window=True) and "_window" in name
    a = assemble(ptx)
    d = assemble(attn.attention_kernel_16(dtype, False, dqk, dv, packed=packed)[1])
    assert a.spill_bytes == 0 and "serialized" not in a.report, a.report
    assert a.sass().count("HGMMA") == d.sass().count("HGMMA")


def _no_spill_in_loop(sass: str) -> None:
    """No local-memory access between the first and the last wgmma, or, where a backward
    branch's target lies between them, between the first such target and the last wgmma: the
    wgmmas before it are the peeled first block step, run once a tile."""
    at = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*)")
    code = [(int(m.group(1), 16), m.group(2)) for m in map(at.search, sass.splitlines()) if m]
    gmma = [a for a, text in code if "GMMA" in text]
    heads = [t for a, text in code if (b := re.search(r"\bBRA\b.*?0x([0-9a-f]+)", text))
             and (t := int(b.group(1), 16)) < a and gmma[0] < t < gmma[-1]]
    start = min(heads, default=gmma[0])
    spills = [a for a, text in code if re.search(r"\b(STL|LDL)\b", text)]
    assert not [a for a in spills if start < a < gmma[-1]], "a spill inside the block loop"


def test_no_spill_in_loop_tells_the_loop_from_the_peeled_step():
    """The helper above on a made-up listing: a store in the peeled first step passes, one
    after the loop head fails."""
    def listing(spill_at):
        body = {0x10: "HGMMA.64x128x16.F32 R24, gdesc[UR4], R24 ;", 0x50: "HGMMA.64x128x16.F32 R24, gdesc[UR4], R24 ;",
                0x60: "@!P0 BRA 0x30 ;", spill_at: "STL.64 [R1+0x8], R168 ;"}
        return "\n".join(f"/*{a:04x}*/ {body.get(a, 'NOP ;')}" for a in range(0, 0x80, 0x10))
    _no_spill_in_loop(listing(0x20))
    with pytest.raises(AssertionError):
        _no_spill_in_loop(listing(0x40))


def test_window_parameters_come_last_and_only_with_a_window():
    """The host appends (left, right) after every other parameter (kernels.window_args): an
    unbounded side past every key (seqlen_q + seqlen_k and a tile's rows), right 0 where
    causal, nothing without a window."""
    layout = attn.layout_for(128)
    import dataclasses
    names = [n for _, n in params_for(dataclasses.replace(layout, window=True))]
    assert names[-2:] == ["window_left", "window_right"] and "window_left" not in str(params_for(layout))
    assert window_args((-1, -1), False, 10, 20) == [] and window_args(None, True, 10, 20) == []
    assert [a.value for a in window_args((5, -1), True, 10, 20)] == [5, 0]
    assert [a.value for a in window_args((-1, 7), False, 10, 20)] == [30 + UNBOUNDED_SLACK, 7]


@pytest.mark.parametrize("block_n", [64, 128, 160, 192, 224])
def test_block_arithmetic_for_any_key_block(block_n):
    """cta.emit_round_down and emit_block_count, emitted and run on lanes of key counts: x
    rounded down to a multiple of block_n and ceil(x / block_n), by shifts and masks for a power
    of two and by a remainder and a division otherwise (MLA's fast mode's 160-key blocks)."""
    from zyfa.asm.ptx.cta import emit_block_count, emit_round_down
    prog = program()
    x, down, count = prog.regs("u32", 3)
    emit_round_down(prog, down, x, block_n)
    emit_block_count(prog, count, x, block_n)
    keys = np.concatenate([np.arange(0, 3 * block_n + 2), [65535, 1 << 20, (1 << 31) - 5]]).astype(np.uint32)
    ev = EV.Evaluator({str(x): keys})
    ev.run(EV.render_body(prog))
    k = keys.astype(np.int64)
    assert (ev.regs[str(down)].astype(np.int64) == k // block_n * block_n).all()
    assert (ev.regs[str(count)].astype(np.int64) == -(-k // block_n)).all()
    ops = " ".join(prog.body)
    assert ("div.u32" in ops) == (block_n & (block_n - 1) != 0)


@pytest.mark.parametrize("ints", [False, True])
@pytest.mark.parametrize("slot_keys", [False, True])
def test_causal_mask_names_each_registers_key(slot_keys, ints):
    """scores.emit_mask (the causal diagonal and seqlen_k's tail) masks exactly the registers
    whose key is past the row's limit, the keys as the accumulator holds them (K's rows in
    slot order: column KEY_OF_SLOT[s] holds key s), with -inf (``ints``: int8_qk's int32
    scores, MASKED_SCORE)."""
    from zyfa.asm.ptx.scores import emit_mask
    prog = program()
    r = {n: prog.reg("u32") for n in ("q", "start_n", "lim0", "lim1")}
    s = prog.regs("f32", S_REGS)
    for si in s:
        prog.emit("mov.f32", si, "0f00000000")
    cta = types.SimpleNamespace(thread=types.SimpleNamespace(q=r["q"]), layout=types.SimpleNamespace(slot_keys=slot_keys))
    emit_mask(prog, cta, types.SimpleNamespace(limits=[r["lim0"], r["lim1"]]), s, r["start_n"], ints)
    q, lim0, lim1 = (x.ravel() for x in np.meshgrid(np.arange(4), np.arange(-1, 300, 7), np.arange(0, 300, 11)))
    u = lambda x: np.asarray(x, np.int64).astype(np.uint32)  # noqa: E731
    ev = EV.Evaluator({str(r["q"]): u(q), str(r["start_n"]): u(np.full_like(q, 128)), str(r["lim0"]): u(lim0),
                       str(r["lim1"]): u(lim1)})
    ev.run(EV.render_body(prog))
    masked = np.stack([ev.regs[str(si)] == (int(MASKED_SCORE, 16) if ints else 0xFF800000) for si in s])
    columns = np.array([acc_column(i) for i in range(S_REGS)])[:, None] + 2 * q
    keys = 128 + _keys(columns, slot_keys)
    limit = np.where(np.array([acc_row_half(i) for i in range(S_REGS)])[:, None] == 1, lim1, lim0)
    assert (masked == (keys > limit)).all()
