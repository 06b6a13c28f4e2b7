"""The generated sm_90a FP8 attention kernel (zyfa.asm.ptx.attention).

On the CPU (CI): the fragment tables agree with the documented wgmma layouts, the host's
V^T permutation matches them, and the kernel assembles with ptxas into QGMMA + TMA with no
spills and no conversion instructions in the main loop. On an H200: the kernel against the
spec (same P rule, block references), float64 and the Triton kernel, over odd seqlens,
seqlen_q < seqlen_k, MQA/GQA and non-causal; dispatch picks it; repeatable bit for bit.
"""
import itertools
import math
import re

import pytest
import torch

from conftest import describe_mismatch, hopper, rel_err
import zyfa
from zyfa.activations import make
from zyfa.asm.ptx import attention as attn
from zyfa.asm.ptx.assemble import assemble
from zyfa.spec.key_order import KEY_OF_SLOT, hopper_vt, slot_order_rows
from zyfa.asm.ptx.fragments import a_operand_position, acc_key, accumulator_position, key_lanes, p_sources
from zyfa.asm.ptx.lean_p import PTX_RULES
from zyfa.spec.rules import HALF_RULES
from zyfa.spec.reference import attention_fp64, fp8_attention_spec



def test_p_sources_put_each_code_where_the_a_operand_reads_it():
    """Every byte of every P.V A register comes from the accumulator entry of the same row
    whose key V^T's permuted slot names."""
    for thread in range(128):
        for k_step in range(4):
            for reg, sources in enumerate(p_sources(k_step)):
                for byte, acc_reg in enumerate(sources):
                    row, key = accumulator_position(thread, acc_reg)
                    a_row, slot = a_operand_position(thread, reg, byte)
                    assert a_row == row
                    assert 32 * k_step + 16 * (slot // 16) + KEY_OF_SLOT[slot % 16] == key
    assert sorted(KEY_OF_SLOT) == list(range(16))


def test_slot_order_rows_pair_each_slot_with_its_own_key():
    """K's rows in slot order (Layout.slot_keys): the 5-d view, read in the order a TMA box lands
    it, puts key s of each 16-key group in the row whose accumulator column feeds A-operand
    slot s, so that slot multiplies V^T's key s; the masks' key of each accumulator register
    (acc_key + key_lanes x q) names the same key; shapes the view cannot express get None."""
    B, Sk, Hkv, D = 2, 64, 3, 128
    k = torch.randint(0, 255, (B, Sk, Hkv, D), dtype=torch.uint8)
    rows = slot_order_rows(k).reshape(-1, Hkv * D)       # row-major over (group, h, q, e): the box's rows
    keys = k.reshape(B * Sk, Hkv * D)
    for thread in range(128):
        q = thread % 4
        for k_step in range(2):
            for reg, sources in enumerate(p_sources(k_step)):
                for byte, acc_reg in enumerate(sources):
                    _, column = accumulator_position(thread, acc_reg)
                    _, slot = a_operand_position(thread, reg, byte)
                    key = 32 * k_step + slot                 # V^T in its own order
                    assert torch.equal(rows[column], keys[key])
                    assert acc_key(acc_reg, True) + key_lanes(True) * q == key
    for reg in range(64):                                        # without slot order: the column
        assert acc_key(reg, False) + key_lanes(False) * 3 == accumulator_position(3, reg)[1]
    assert slot_order_rows(k[:, :40]) is None                     # keys not a multiple of 16
    assert slot_order_rows(k[:, :48]) is None                     # batch not one run of rows
    assert slot_order_rows(k.transpose(2, 3)) is None             # a head's row not contiguous


def test_slot_order_k_goes_where_it_measured_faster():
    """kernels._slot_rows: dense calls take the slot-order K (and V^T as stored); packed
    batches and the long d128 layout keep the permuted V^T (docs/decisions.md)."""
    from zyfa.asm.ptx.kernels import _slot_rows
    k = torch.zeros(2, 64, 2, 128, dtype=torch.uint8)
    assert _slot_rows(k, None, False) is not None
    assert _slot_rows(k, object(), False) is None
    assert _slot_rows(k, None, True) is None


def _sanitize_cases():
    """bench/sanitize.py loaded as a module (it is a script outside the package): its cases."""
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).parents[2] / "bench" / "sanitize.py"
    spec = importlib.util.spec_from_file_location("sanitize_cases", path)
    sanitize = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sanitize)
    return sanitize


def test_sanitizer_runs_each_head_dims_kernel_in_both_key_orders():
    """bench/sanitize.py (compute-sanitizer's and the 1,000-launch cases): for each E4M3 head dim,
    a dense shape that reads K in slot order and one that rewrites V^T, so both kernels of each
    head dim are checked."""
    from zyfa.asm.ptx.kernels import _slot_rows
    sanitize = _sanitize_cases()
    orders = {}
    for (B, Sq, Sk, Hq, Hkv, D, Dv), _ in sanitize.PTX_SHAPES:
        long = attn.long_keys(D, Dv, Sk, False)
        slot = _slot_rows(torch.zeros(B, Sk, Hkv, D, dtype=torch.uint8), None, long) is not None
        orders.setdefault((D, Dv), set()).add(slot)
    assert set(orders) == set(attn.HEAD_DIMS)
    assert all(o == {True, False} for o in orders.values()), orders



def test_sanitizer_runs_each_int8_kernel():
    """bench/sanitize.py runs the generated INT8 Q.K^T kernel at every head dim and in the long-key
    layout, so its sanitizer and 1,000-launch passes cover every INT8 kernel a call can take."""
    sanitize = _sanitize_cases()
    int8 = [shape for backend, dtype, shape, *_ in sanitize.CASES if (backend, dtype) == ("ptx", "int8")]
    assert {(D, Dv) for *_, D, Dv in int8} == set(attn.HEAD_DIMS)
    assert any(attn.long_keys(D, Dv, Sk) for _, _, Sk, _, _, D, Dv in int8)

def test_hopper_vt_places_keys_in_their_slots():
    B, Sk, Hkv, Dv = 2, 37, 3, 128                       # Sk not a multiple of 16: zero padded
    v = torch.randint(0, 126, (B, Sk, Hkv, Dv), dtype=torch.uint8).view(torch.float8_e4m3fn)
    vt = hopper_vt(v)
    assert vt.shape == (B, Hkv, Dv, 48)
    u = v.view(torch.uint8)
    for key in range(48):
        slot = 16 * (key // 16) + KEY_OF_SLOT.index(key % 16)
        want = u[:, key].permute(1, 2, 0) if key < Sk else torch.zeros(Hkv, Dv, B, dtype=torch.uint8)
        assert torch.equal(vt[:, :, :, slot].permute(1, 2, 0), want), key


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("rule", attn.ATTENTION_RULES)
def test_attention_kernel_assembles_within_budget(rule, causal):
    from zyfa.asm.ptx.block import BLOCK_LOOP_COPIES as n      # the loop below the band, the band's
    hmma = rule in attn.HMMA_RULES
    name, ptx = attn.attention_kernel(rule, causal)
    a = assemble(ptx)
    sass = a.sass()
    ops = re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)", sass)
    assert a.spill_bytes == 0, a.report
    assert a.registers <= attn.REGISTER_BUDGET, f"{a.registers} registers > budget {attn.REGISTER_BUDGET}"
    assert ops.count("QGMMA") == 8 * n, "4 wgmma for Q K^T, 4 for P V^T"
    assert ops.count("HGMMA") == (8 * n if hmma else 0), "8 half-precision P . ones"
    assert "UTMALDG" in ops and "SYNCS" in " ".join(ops)
    # the softmax lies between the first QGMMA (Q K^T) and the last (P V^T); the prologue's
    # integer divisions (batch, head, kv head) may use conversions, the loop may not
    first, last = ops.index("QGMMA"), len(ops) - 1 - ops[::-1].index("QGMMA")
    loop = ops[first:last]
    for conversion in ("F2I", "I2F", "F2F"):
        assert conversion not in loop, f"{conversion} in the main loop"
    # exp2 of alpha and beta for the thread's two rows; per element only under the exact rule
    assert sass.count("MUFU.EX2") == n * (4 + (attn.BLOCK_N // 2 if rule == "exact" else 0))
    # F2FP in the epilogue's BF16 packing (one per pair of output columns and row); in the
    # loop one per two scores: F2FP.F16 for a half-precision rule, to E4M3 and back to half
    # (the row sums' A operand) for exact
    loop_packs = n * {"lean_cubic_f16": 32, "exact": 64}.get(rule, 0)
    assert loop.count("F2FP") == loop_packs
    assert sass.count("F2FP.F16.F32.PACK_AB") == (32 * n if rule in HALF_RULES else 0)
    assert ops.count("F2FP") - loop_packs == ptx.count("cvt.rn.bf16x2.f32") == 32
    if rule in HALF_RULES:
        assert loop.count("HFMA2") == n * 4 * 32 and "FFMA" in loop     # 4 a pair; float32 FFMA for y and the row sums


@pytest.mark.parametrize("long", [False, True])
@pytest.mark.parametrize("dqk", [64, 128, 192, 256])
def test_running_kernels_have_no_fold(dqk, long):
    """ref_rule "running": P V^T adds to the total in place: the loop keeps its QGMMAs, has no
    fold FFMAs (one a score for y, the rest the rounded-P row sums' and the lean rules'), and
    fits its registers without spills; Dv 256 keeps S(j) beside P(j - 1) V^T (pipelined)."""
    if long and dqk != 128:
        pytest.skip("the long layout is d128's")
    block = assemble(attn.attention_kernel("exact", True, dqk=dqk, long=long)[1])
    running = assemble(attn.attention_kernel("exact", True, dqk=dqk, long=long, ref_rule="running")[1])
    assert running.spill_bytes == 0, running.report
    count = lambda a, op: len(re.findall(rf"\b{op}\b", a.sass()))   # noqa: E731
    name, ptx = attn.attention_kernel("exact", True, dqk=dqk, long=long, ref_rule="running")
    assert "_running" in name
    # P V^T (A from registers) adds to the total from its first k-step: no scale-d of 0
    pv = lambda text: [ln for ln in text.splitlines() if "e4m3.e4m3" in ln and "}, {%b32" in ln]  # noqa: E731
    block_ptx = attn.attention_kernel("exact", True, dqk=dqk, long=long)[1]
    assert pv(ptx) and not [ln for ln in pv(ptx) if ln.endswith(", 0, 1, 1;")]
    assert [ln for ln in pv(block_ptx) if ln.endswith(", 0, 1, 1;")]      # the fold's fresh accumulator
    if dqk == 256:        # the default takes each block in turn; the fast mode waits for S(j) alone
        assert "wgmma.wait_group.sync.aligned 2;" in ptx
        return
    # the fold: one FFMA an output register a block, in each of the loop's two copies
    fold = count(block, "FFMA") - count(running, "FFMA")
    assert fold >= attn.fp8_dv(dqk) // 2 * 2, (fold, dqk)


@pytest.mark.parametrize("rule", ["exact", "lean_cubic"])
@pytest.mark.parametrize("dqk,long", [(128, True), (192, False), (256, False)])
def test_fast_mode_rescales_the_total_while_s_runs(dqk, long, rule):
    """The pipelined fast-mode consumers with the exact rule multiply the total by alpha(j - 1)
    between issuing S(j) and P(j - 1) V^T (FlashAttention-3's order: the multiplies run beside
    the GEMM, not in the tail after the P V^T wait), in both copies of the block loop; the lean
    rules' consumers keep the rescale after the wait, where ptxas keeps their wgmmas in flight.
    Neither makes ptxas serialize the wgmmas."""
    name, ptx = attn.attention_kernel(rule, True, dqk=dqk, long=long, ref_rule="running")
    lines = ptx.splitlines()
    wgmma = [i for i, ln in enumerate(lines) if "e4m3.e4m3" in ln]
    pv_first = [i for k, i in enumerate(wgmma) if "}, {%b32" in lines[i]                    # A: P's registers
                and "}, {%b32" not in lines[wgmma[k - 1]]]                                  # a group's first k-step
    spans = [lines[max(k for k in wgmma if k < i):i] for i in pv_first]   # from the last wgmma before it
    spans = [sp for sp in spans if not any("wgmma.wait" in ln for ln in sp)]   # S(j) issued, still in flight
    rescaled = [sum(ln.strip().startswith("mul.rn.f32") for ln in sp) for sp in spans]
    assert len(spans) == 2 and rescaled == [attn.fp8_dv(dqk) // 2 if rule == "exact" else 0] * 2, (rescaled, name)
    assert "serialized" not in assemble(ptx).report


def _under_s(ptx: str) -> list[list[str]]:
    """The lines between issuing S(j) and the first k-step of P(j - 1) V^T, in each GEMM phase
    that issues both (S(j) still in flight: no wait between them)."""
    lines = ptx.splitlines()
    wgmma = [i for i, ln in enumerate(lines) if ln.strip().startswith("wgmma.mma_async")]
    pv_first = [i for k, i in enumerate(wgmma) if "}, {%b32" in lines[i]                    # A: P's registers
                and k and "}, {%b32" not in lines[wgmma[k - 1]]]                            # a group's first k-step
    spans = [lines[max(k for k in wgmma if k < i):i] for i in pv_first]
    return [sp for sp in spans if not any("wgmma.wait" in ln for ln in sp)]


@pytest.mark.parametrize("rule", ["exact", "lean_cubic"])
def test_default_folds_under_s_at_mla_only(rule):
    """Block references (the default): MLA's E4M3 consumer folds block j - 2's P V^T into the
    total (one FMA an output register) while S(j) runs, in both copies of the block loop
    (Layout.fold_under_s); d128's long layout, the INT8 kernel, and MLA's windowed and packed
    kernels fold block j - 1 after the P V^T wait (measured slower or not measured). Neither
    spills nor makes ptxas serialize the wgmmas."""
    def folds(dqk=192, **kw):
        name, ptx = attn.attention_kernel(rule, True, dqk, **kw)
        a = assemble(ptx)
        assert a.spill_bytes == 0 and "serialized" not in a.report, (name, a.report)
        spans = _under_s(ptx)
        assert len(spans) == 2, name
        return [sum(ln.strip().startswith("fma.rn.f32") for ln in sp) for sp in spans]
    assert folds() == [attn.fp8_dv(192) // 2] * 2
    for kw in (dict(dqk=128, long=True), dict(int8_qk=True), dict(window=True), dict(packed=True)):
        assert folds(**kw) == [0, 0], kw


def test_fast_mode_takes_wide_blocks_at_mla():
    """The fast mode's exact rule in MLA's layout: key blocks of WIDE_KEYS (S m64n160, P V^T in
    5 k-steps over two 128-key V^T boxes, three stages within the shared memory), no spills, no
    serialized wgmmas; the lean rules, windows, packed batches and d128 (its long layout too)
    keep 128 keys, and key_block says which block the spec's references take."""
    n = attn.WIDE_KEYS[192]
    wide = attn.layout_for(192, wide=True)
    assert (wide.block_n, wide.v_boxes, wide.stages) == (n, 2, 3)
    assert wide.stage_bytes == n * 192 + 2 * 128 * 128 and wide.shared_bytes <= 227 * 1024
    name, ptx = attn.attention_kernel("exact", True, 192, ref_rule="running")
    a = assemble(ptx)
    assert a.spill_bytes == 0 and "serialized" not in a.report, a.report
    assert ptx.count(f"m64n{n}k32") == 3 * 192 // 32        # S: block 0 and the loop's two copies
    assert a.sass().count("QGMMA") == 3 * 192 // 32 + 3 * n // 32   # P V^T: the two copies and the last
    assert attn.key_block(192, 128, 1 << 20, "exact", "running") == n
    lines = ptx.splitlines()
    pv = [i for i, ln in enumerate(lines) if "}, {%b32" in ln][:n // 32]     # the first P V^T's k-steps
    steps = [int(re.fullmatch(r"\s*add\.u64 %u64_\d+, %u64_\d+, (\d+);", lines[i - 1]).group(1)) for i in pv]
    assert steps == [box * 128 * 128 // 16 + 2 * k for box in (0, 1) for k in range(4)][:n // 32]   # 16-byte units
    v_loads = [ln for ln in lines if "cp.async.bulk.tensor.3d" in ln]
    assert len(v_loads) % 2 == 0 and v_loads                  # V^T: two 128-key boxes a block
    assert attn.key_block(192, 128, 1 << 20, "exact", "running", packed=True) == attn.BLOCK_N
    for dqk, p_rule, ref_rule, seqlen_k, window in ((192, "exact", "block", 1 << 20, False),
                                                    (192, "lean_cubic", "running", 1 << 20, False),
                                                    (192, "exact", "running", 1 << 20, True),
                                                    (128, "exact", "running", attn.LONG_KEYS, False),
                                                    (128, "exact", "running", attn.LONG_KEYS - 1, False)):
        assert attn.key_block(dqk, attn.fp8_dv(dqk), seqlen_k, p_rule, ref_rule, window=window) == attn.BLOCK_N
        ptx = attn.attention_kernel(p_rule, True, dqk, long=dqk == 128 and seqlen_k >= attn.LONG_KEYS,
                                    ref_rule=ref_rule, window=window)[1]
        assert f"m64n{n}" not in ptx and "m64n128k32" in ptx


def test_long_keys_take_the_specialized_layout():
    """FP8 d128 from LONG_KEYS keys, dense only: the producer / two-consumer kernel, its own name;
    other head dims and packed batches refuse the long layout."""
    assert attn.long_keys(128, 128, attn.LONG_KEYS) and not attn.long_keys(128, 128, attn.LONG_KEYS - 1)
    assert not attn.long_keys(128, 128, 1 << 20, packed=True) and not attn.long_keys(192, 128, 1 << 20)
    layout = attn.layout_for(128, long=True)
    assert layout.specialized and layout.shared_bytes <= 227 * 1024
    name, ptx = attn.attention_kernel("exact", True, long=True)
    assert name.endswith("_long") and name != attn.attention_kernel("exact", True)[0]
    a = assemble(ptx)
    assert a.spill_bytes == 0, a.report
    with pytest.raises(ValueError):
        attn.layout_for(192, long=True)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("rule", attn.ATTENTION_RULES)
def test_mla_kernel_hands_registers_to_its_consumers(rule, causal):
    """Dqk 192, the warp-specialized kernel (v11): the launch allots 168 registers a thread;
    the producer warpgroup gives all but 24 back and the consumers take 240 (setmaxnreg).
    Q K^T takes 4 + 2 steps (the tail tile's 64-byte rows, 64-byte swizzle). The exact
    rule's block loop (between the first and the last wgmma) neither spills nor reloads;
    the others spill a few words, up to 108 bytes in all (measured)."""
    from zyfa.asm.ptx import specialized
    a = assemble(attn.attention_kernel(rule, causal, dqk=192)[1])
    sass = a.sass()
    assert "C7515" not in a.report and "serialized" not in a.report, a.report
    assert a.registers == specialized.LAUNCH_REGISTERS[2] and a.spill_bytes <= 128, a.report
    assert "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xf0" in sass and "USETMAXREG.DEALLOC.CTAPOOL 0x18" in sass
    used = max(int(r) for r in re.findall(r"\bR(\d+)\b", sass))
    assert 168 <= used < 240, f"the consumers use up to R{used}"
    lines = sass.splitlines()
    gmma = [i for i, line in enumerate(lines) if "GMMA" in line]
    if rule == "exact":
        assert not any("LDL" in line or "STL" in line for line in lines[gmma[0]:gmma[-1]])
    # Q K^T of block 0; in each copy of the loop Q K^T and P V^T; P V^T of the last block
    from zyfa.asm.ptx.block import BLOCK_LOOP_COPIES as n
    assert sass.count("QGMMA") == 6 + n * (6 + 4) + 4
    assert sass.count("HGMMA") == (8 * (1 + n) if rule in attn.HMMA_RULES else 0)   # row sums a softmax
    assert "SYNCS.ARRIVE.TRANS64.A1T0" in sass                             # a stage freed


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("rule", attn.ATTENTION_RULES)
def test_d64_kernel_fits_four_ctas_an_sm(rule, causal):
    """Dqk 64 / Dv 64: the serial kernel with one 64-byte column tile (64-byte swizzle, 2 steps
    of Q K^T) and P V^T as m64n64k32; capped at 128 registers without spills, so four CTAs
    (4 x 39 KB of shared memory) share an SM."""
    layout = attn.layout_for(64, dv=64)
    assert not layout.specialized and 4 * layout.shared_bytes <= 228 * 1024
    name, ptx = attn.attention_kernel(rule, causal, dqk=64)
    a = assemble(ptx)
    sass = a.sass()
    assert a.spill_bytes == 0 and a.registers <= attn.REGISTER_CAP_D64, a.report
    from zyfa.asm.ptx.block import BLOCK_LOOP_COPIES as n
    assert sass.count("QGMMA.64x128x32") == 2 * n and sass.count("QGMMA.64x64x32") == 4 * n
    assert sass.count("HGMMA") == (8 * n if rule in attn.HMMA_RULES else 0)
    assert "UTMALDG" in sass


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("rule", attn.ATTENTION_RULES)
def test_d256_kernel_takes_each_block_in_turn(rule, causal):
    """Dqk 256 / Dv 256: the warp-specialized kernel with three stages of 64 KB, whose
    consumers take each block in turn: Q K^T over two 128-byte column tiles (8 steps), the
    softmax, then P V^T in two halves of 128 columns (4 steps each), each folded into its half
    of the 128 output registers. The exact rule's block loop neither spills nor reloads; the
    spills are per tile (its row state), up to 136 bytes (measured)."""
    from zyfa.asm.ptx import specialized
    layout = attn.layout_for(256, dv=256)
    assert layout.specialized and layout.stages == 3 and layout.shared_bytes <= 227 * 1024
    a = assemble(attn.attention_kernel(rule, causal, dqk=256)[1])
    sass = a.sass()
    assert "C7515" not in a.report and "serialized" not in a.report, a.report
    assert a.registers == specialized.LAUNCH_REGISTERS[2] and a.spill_bytes <= 160, a.report
    assert "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xf0" in sass and "USETMAXREG.DEALLOC.CTAPOOL 0x18" in sass
    lines = sass.splitlines()
    gmma = [i for i, line in enumerate(lines) if "QGMMA" in line]
    if rule == "exact":
        assert not any("LDL" in line or "STL" in line for line in lines[gmma[0]:gmma[-1]])
    a_operands = [lines[i].split("QGMMA")[1].split(",")[1].strip() for i in gmma]
    assert len(gmma) == 8 + 8, "8 steps of Q K^T, 2 x 4 of P V^T"
    assert all(a.startswith("gdesc") for a in a_operands[:8]), "Q K^T: A (Q) from shared memory"
    assert all(a.startswith("R") for a in a_operands[8:]), "P V^T: A (P) from registers"
    assert sass.count("HGMMA") == (8 if rule in attn.HMMA_RULES else 0)


def test_attention_kernel_refuses_what_it_does_not_implement():
    with pytest.raises(ValueError, match="P rules"):
        attn.attention_kernel("exp")
    with pytest.raises(ValueError, match="head dims"):
        attn.attention_kernel("exact", dqk=96)


# ---------------------------------------------------------------------------- on an H200
SHAPES = [  # B, Sq, Sk, Hq, Hkv, causal
    (1, 70, 70, 2, 1, True),          # seqlen not a multiple of any block, MQA
    (2, 33, 97, 4, 2, True),          # seqlen_q < seqlen_k (bottom-right)
    (1, 1, 45, 2, 2, True),           # one query row
    (1, 1, 1, 2, 1, True),            # one token
    (1, 777, 777, 8, 1, True),        # MQA, several diagonal blocks
    (2, 300, 1000, 4, 4, True),
    (1, 130, 200, 4, 2, False),       # non-causal with a key tail
    (1, 2048, 2048, 8, 2, True),      # GQA 4:1
]


def _case(shape, kind="realistic", granularity="head", head_dim=128):
    B, Sq, Sk, Hq, Hkv, causal = shape
    q, k, v = make(kind, B, Sq, Hq, Hkv, head_dim, attn.fp8_dv(head_dim), seqlen_k=Sk, seed=Sq + 3 * Sk,
                   device="cuda")
    return zyfa.quantize_fp8(q, k, v, granularity=granularity), causal


def _exact_s_case(shape, seed, negative=False, head_dim=128):
    """FP8 inputs whose S = Q K^T the tensor cores compute exactly (small integers: every
    partial sum fits their ~13-bit accumulation): the kernel's t and y then equal the spec's
    bit for bit, and so do the P codes. ``negative``: a negative q_descale (c < 0), which
    the kernel handles by flipping Q's signs."""
    B, Sq, Sk, Hq, Hkv, causal = shape
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randint(-3, 4, (B, Sq, Hq, head_dim), device="cuda", generator=g).float().to(torch.float8_e4m3fn)
    k = torch.randint(-3, 4, (B, Sk, Hkv, head_dim), device="cuda", generator=g).float().to(torch.float8_e4m3fn)
    dv = attn.fp8_dv(head_dim)
    v = (torch.randn(B, Sk, Hkv, dv, device="cuda", generator=g) * 64).to(torch.float8_e4m3fn)
    q_descale = 0.25 + torch.rand(B, Hkv, device="cuda", generator=g)    # logits spread over ~16 in log2
    k_descale = 0.5 + torch.rand(B, Hkv, device="cuda", generator=g)
    v_descale = torch.rand(B, Hkv, dv, device="cuda", generator=g) / 64
    if negative:
        q_descale = -q_descale
    return dict(q=q, k=k, v=v, q_descale=q_descale, k_descale=k_descale, v_descale=v_descale), causal


@hopper
@pytest.mark.parametrize("rule", PTX_RULES)
@pytest.mark.parametrize("shape", SHAPES)
def test_ptx_kernel_equals_spec_when_s_is_exact(shape, rule):
    kw, causal = _exact_s_case(shape, seed=len(rule) + shape[1])
    _assert_equals_spec(kw, causal, rule)


@hopper
@pytest.mark.parametrize("ref_rule", ["block", "running"])
@pytest.mark.parametrize("shape", SHAPES)
def test_ptx_exact_rule_equals_spec_but_near_rounding_midpoints(shape, ref_rule):
    """The exact rule on MUFU.EX2 (~2 ulp) with the hardware's E4M3 rounding: a P code can
    differ from the float64 spec's by one step where 2^(y + 8) is within MUFU's error of a
    midpoint (the H200 run prints how often). The output stays within the BF16 rounding;
    in the LSE such a step shows in few rows, each by at most one E4M3 step (2^-3). The fast
    mode (running) sums the exponentials before rounding: its LSE is off only by MUFU's ulps."""
    kw, causal = _exact_s_case(shape, seed=shape[1] + 5)
    out, lse = zyfa.flash_attn_func(**kw, causal=causal, p_rule="exact", ref_rule=ref_rule, return_lse=True,
                                    backend="ptx")
    spec, lse_spec = fp8_attention_spec(**kw, causal=causal, p_rule="exact", ref_rule=ref_rule, return_lse=True)
    rounding = rel_err(spec.bfloat16(), spec)
    diff = (lse.double() - lse_spec).abs()
    off = (diff > 1e-5).double().mean().item()
    print(f"{shape}: out-spec {rel_err(out, spec):.2e} (rounding {rounding:.2e}), rows with an LSE off by "
          f"> 1e-5: {off:.2e}, largest {diff.max().item():.2e}")
    assert rel_err(out, spec) <= 1.5 * rounding + 1e-4, describe_mismatch(out, spec)
    assert off <= 1e-2 and diff.max() <= 0.125, describe_mismatch(lse, lse_spec, 1e-5)
    if ref_rule == "running":      # l from the exponentials themselves: no rounding step can show
        assert diff.max() < 1e-5, describe_mismatch(lse, lse_spec, 1e-5)


@hopper
@pytest.mark.parametrize("long", [False, True])
@pytest.mark.parametrize("head_dim", [64, 128, 192, 256])
@pytest.mark.parametrize("shape", SHAPES[4:])
def test_fast_mode_sums_the_exponentials(shape, head_dim, long, monkeypatch):
    """The fast mode's exact rule (each thread's FADDs of the unrounded exponentials, the quad's
    parts added at the end) gives the spec's LSE within float32 ordering and MUFU's ulps at
    every head dim and in the long layout; the output within the BF16 rounding."""
    if long and head_dim != 128:
        pytest.skip("the long layout is d128's")
    if long:
        from zyfa.asm.ptx import layout
        monkeypatch.setattr(layout, "LONG_KEYS", 1)
    kw, causal = _exact_s_case(shape, seed=shape[1] + head_dim + 3, head_dim=head_dim)
    out, lse = zyfa.flash_attn_func(**kw, causal=causal, p_rule="exact", ref_rule="running", return_lse=True,
                                    backend="ptx")
    block_n = attn.key_block(head_dim, attn.fp8_dv(head_dim), kw["k"].shape[1], "exact", "running")
    spec, lse_spec = fp8_attention_spec(**kw, causal=causal, p_rule="exact", ref_rule="running", return_lse=True,
                                        block_n=block_n)
    assert rel_err(out, spec) <= 1.5 * rel_err(spec.bfloat16(), spec) + 1e-4, describe_mismatch(out, spec)
    assert (lse.double() - lse_spec).abs().max() < 1e-5, describe_mismatch(lse, lse_spec, 1e-5)


@hopper
@pytest.mark.parametrize("head_dim", [64, 128, 192, 256])
@pytest.mark.parametrize("shape", SHAPES[4:6])
def test_ptx_kernel_equals_spec_with_a_negative_descale(shape, head_dim):
    """A negative descale: Q's signs flipped in shared memory (for Dqk 192 by each consumer
    warpgroup for its own tile)."""
    kw, causal = _exact_s_case(shape, seed=shape[1], negative=True, head_dim=head_dim)
    _assert_equals_spec(kw, causal, "lean_cubic")


def _assert_equals_spec(kw, causal, rule, ref_rule="block", window=(-1, -1)):
    out, lse = zyfa.flash_attn_func(**kw, causal=causal, p_rule=rule, ref_rule=ref_rule, return_lse=True,
                                    backend="ptx", window_size=window)
    spec, lse_spec = fp8_attention_spec(**kw, causal=causal, p_rule=rule, ref_rule=ref_rule, return_lse=True,
                                        window_size=window)
    # same P codes: what is left is accumulation order (and P V's tensor-core sums) under
    # the BF16 rounding of the output, the yardstick
    rounding = rel_err(spec.bfloat16(), spec)
    assert rel_err(out, spec) <= 1.5 * rounding + 1e-4, (rel_err(out, spec), rounding, describe_mismatch(out, spec))
    # float32 row sums of the same P: the LSE differs by float32 ordering only
    assert (lse.double() - lse_spec).abs().max() < 1e-5, describe_mismatch(lse, lse_spec, 1e-5)


@hopper
@pytest.mark.parametrize("rule", ["lean_cubic", "lean_cubic_f16"])
@pytest.mark.parametrize("head_dim", [64, 128, 192, 256])
@pytest.mark.parametrize("shape", SHAPES)
def test_running_reference_equals_spec_when_s_is_exact(shape, head_dim, rule):
    """The fast mode (ref_rule "running": P V^T accumulated in place, the total rescaled where a
    row's max moved) gives the spec's running-max P codes, output and LSE; row sums on the ALUs
    (lean_cubic) and from wgmmas in P V^T's group (a half rule)."""
    kw, causal = _exact_s_case(shape, seed=shape[1] + head_dim, head_dim=head_dim)
    _assert_equals_spec(kw, causal, rule, ref_rule="running")


@hopper
@pytest.mark.parametrize("shape", SHAPES)
def test_running_reference_in_the_long_layout_equals_spec(shape, monkeypatch):
    """d128's long-key layout (the pipelined consumers) with the running reference."""
    from zyfa.asm.ptx import layout
    monkeypatch.setattr(layout, "LONG_KEYS", 1)
    kw, causal = _exact_s_case(shape, seed=shape[1] + 7)
    _assert_equals_spec(kw, causal, "lean_cubic_f16", ref_rule="running")


@hopper
@pytest.mark.parametrize("head_dim", [64, 128, 192, 256])
@pytest.mark.parametrize("shape", SHAPES[4:])
def test_running_reference_vs_float64(shape, head_dim):
    """Realistic activations, the exact rule: the fast mode no further from float64 than the
    running-max spec (the check test_ptx_kernel_vs_spec_and_float64 makes of the default)."""
    x, causal = _case(shape, head_dim=head_dim)
    out = zyfa.flash_attn_func(**x.kwargs(), causal=causal, p_rule="exact", ref_rule="running", backend="ptx")
    spec = fp8_attention_spec(**x.kwargs(), causal=causal, p_rule="exact", ref_rule="running")
    ref = attention_fp64(*x.dequantized(), causal=causal)
    spec_err, rounding = rel_err(spec, ref), rel_err(spec.bfloat16(), spec)
    assert rel_err(out, ref) <= 1.1 * math.hypot(spec_err, rounding), (rel_err(out, ref), spec_err, rounding)


@hopper
@pytest.mark.parametrize("rule", attn.ATTENTION_RULES)
@pytest.mark.parametrize("shape", SHAPES)
def test_ptx_kernel_vs_spec_and_float64(shape, rule):
    """Realistic activations: the tensor cores' accumulation of S (~13 bits) moves many t
    across a P rounding boundary (measured: the kernel, like the Triton kernel, sits ~0.7x
    the spec's own error away from the spec), so the checks here are against float64:
    no further from it than the spec. Equality with the spec is the exact-S test's job."""
    x, causal = _case(shape)
    out, lse = zyfa.flash_attn_func(**x.kwargs(), causal=causal, p_rule=rule, return_lse=True, backend="ptx")
    _, lse_triton = zyfa.flash_attn_func(**x.kwargs(), causal=causal, p_rule=rule, return_lse=True, backend="triton")
    spec, lse_spec = fp8_attention_spec(**x.kwargs(), causal=causal, p_rule=rule, return_lse=True)
    ref, lse_ref = attention_fp64(*x.dequantized(), causal=causal, return_lse=True)
    spec_err = rel_err(spec, ref)
    rounding = rel_err(spec.bfloat16(), spec)              # the kernel writes BF16; the spec float64
    print(f"{shape} {rule}: kernel {rel_err(out, ref):.3e} spec {spec_err:.3e} kernel-spec {rel_err(out, spec):.3e}")
    assert rel_err(out, ref) <= 1.1 * math.hypot(spec_err, rounding), (rel_err(out, ref), spec_err, rounding)
    # the LSE takes the tensor cores' error in S directly (the spec's S is exact): the
    # yardstick is the larger of the spec's and the Triton kernel's (same S) LSE errors
    lse_err = lambda x: (x.double() - lse_ref).abs().max().item()   # noqa: E731
    assert lse_err(lse) <= 1.1 * max(lse_err(lse_spec), lse_err(lse_triton)) + 1e-4, \
        (lse_err(lse), lse_err(lse_spec), lse_err(lse_triton))


@hopper
@pytest.mark.parametrize("rule", ["lean_cubic_f16", "exact"])
@pytest.mark.parametrize("shape", SHAPES[4:])
def test_ptx_kernel_agrees_with_triton(shape, rule):
    x, causal = _case(shape, kind="gaussian")
    a, lse_a = zyfa.flash_attn_func(**x.kwargs(), causal=causal, p_rule=rule, return_lse=True, backend="ptx")
    b, lse_b = zyfa.flash_attn_func(**x.kwargs(), causal=causal, p_rule=rule, return_lse=True, backend="triton")
    spec = fp8_attention_spec(**x.kwargs(), causal=causal, p_rule=rule)
    rounding = rel_err(spec.bfloat16(), spec)
    # same wgmma for S, same t, same P codes: only accumulation order differs
    assert rel_err(a, b) <= 1.5 * rounding, (rel_err(a, b), rounding, describe_mismatch(a, b))
    diff = (lse_a - lse_b).abs()
    if rule == "exact":
        # the two paths' exp2 arguments round differently (the ptx kernel folds the + 8 into
        # its FFMA), so a P code can differ by one step near a rounding midpoint (measured on
        # the H200: one row in 6,216 by 2.3e-4): few rows, each by at most one E4M3 step
        assert (diff > 1e-4).double().mean() <= 1e-3 and diff.max() <= 0.125, describe_mismatch(lse_a, lse_b, 1e-4)
    else:
        assert diff.max() < 1e-4, describe_mismatch(lse_a, lse_b, 1e-4)


@hopper
@pytest.mark.parametrize("head_dim", [64, 192, 256])
@pytest.mark.parametrize("rule", PTX_RULES)
@pytest.mark.parametrize("shape", SHAPES)
def test_other_head_dims_equal_spec(shape, rule, head_dim):
    """Dqk 64 (one 64-byte column tile, P V^T m64n64k32), MLA's 192 / 128 (a 128-byte and a
    64-byte column tile) and 256 (consumers taking each block in turn, P V^T in two halves).
    Exact S: the spec's P codes (the bit-exact rules), so the spec's output within the BF16
    rounding."""
    kw, causal = _exact_s_case(shape, seed=shape[1] + 19 + head_dim, head_dim=head_dim)
    _assert_equals_spec(kw, causal, rule)


@hopper
@pytest.mark.parametrize("head_dim", [64, 192, 256])
@pytest.mark.parametrize("shape", SHAPES[4:])
def test_other_head_dims_vs_float64(shape, head_dim):
    x, causal = _case(shape, head_dim=head_dim)
    out = zyfa.flash_attn_func(**x.kwargs(), causal=causal, backend="ptx")
    spec = fp8_attention_spec(**x.kwargs(), causal=causal, p_rule="exact")
    ref = attention_fp64(*x.dequantized(), causal=causal)
    spec_err, rounding = rel_err(spec, ref), rel_err(spec.bfloat16(), spec)
    print(f"{shape} d{head_dim}: kernel {rel_err(out, ref):.3e} spec {spec_err:.3e}")
    assert rel_err(out, ref) <= 1.1 * math.hypot(spec_err, rounding), (rel_err(out, ref), spec_err, rounding)


@hopper
def test_dispatch_selects_ptx_for_fp8_d128():
    x, causal = _case((1, 64, 64, 4, 2, True))
    assert zyfa.explain(causal=True, **x.kwargs()).startswith("selected: ptx")
    for head_dim in (64, 192, 256):
        other, _ = _case((1, 64, 64, 4, 2, True), head_dim=head_dim)
        assert zyfa.explain(causal=True, **other.kwargs()).startswith("selected: ptx")
    fine, _ = _case((1, 64, 64, 4, 2, True), granularity="fine")
    assert zyfa.explain(causal=True, **fine.kwargs()).startswith("selected: triton")
    assert zyfa.explain(causal=True, **x.kwargs(), p_rule="exact").startswith("selected: ptx")
    assert zyfa.explain(causal=True, **x.kwargs(), ref_rule="running").startswith("selected: ptx")
    assert "fast mode" in zyfa.explain(causal=True, **x.kwargs(), ref_rule="running")
    assert zyfa.explain(causal=True, **x.kwargs(), ref_rule="block_pow2").startswith("selected: triton")


@hopper
def test_ptx_repeatable_and_every_element_written():
    x, causal = _case((2, 333, 333, 4, 1, True))
    a = zyfa.flash_attn_func(causal=True, **x.kwargs(), backend="ptx")
    torch.full((1 << 24,), float("nan"), device="cuda")   # poison the allocator's free memory
    b = zyfa.flash_attn_func(causal=True, **x.kwargs(), backend="ptx")
    assert torch.isfinite(b).all()
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))


@hopper
@pytest.mark.parametrize("shape", SHAPES)
def test_long_key_layout_equals_serial(shape, monkeypatch):
    """The long-key layout (the specialized schedule at d128) computes what the serial kernel
    does, bit for bit, output and LSE (same blocks, same fold order): checked on the edge
    shapes by lowering LONG_KEYS to 1 (the next test takes it as the dispatcher does, at 16K)."""
    from zyfa.asm.ptx import layout
    x, causal = _case(shape)
    out, lse = zyfa.flash_attn_func(**x.kwargs(), causal=causal, return_lse=True, backend="ptx")
    monkeypatch.setattr(layout, "LONG_KEYS", 1)
    out_long, lse_long = zyfa.flash_attn_func(**x.kwargs(), causal=causal, return_lse=True, backend="ptx")
    assert torch.equal(out.view(torch.int16), out_long.view(torch.int16)), describe_mismatch(out_long, out)
    assert torch.equal(lse, lse_long), describe_mismatch(lse_long, lse, 0.0)


@hopper
def test_long_key_layout_vs_float64():
    """A 16K-key call (the long layout by the dispatcher's rule) no further from float64 than
    the spec on the last rows."""
    x, causal = _case((1, 512, 16384, 2, 1, True))
    out = zyfa.flash_attn_func(**x.kwargs(), causal=causal, backend="ptx")
    spec = fp8_attention_spec(x.q, x.k, x.v, x.q_descale, x.k_descale, x.v_descale, causal=causal)
    ref = attention_fp64(*x.dequantized(), causal=causal)
    assert rel_err(out, ref) <= 1.1 * rel_err(spec, ref) + 1e-3, (rel_err(out, ref), rel_err(spec, ref))


def test_fallback_is_logged_once(caplog):
    import logging
    q, k, v = make("gaussian", 1, 8, 2, 1, 64)
    with caplog.at_level(logging.INFO, logger="zyfa"):
        for _ in range(3):
            zyfa.explain(q, k, v, causal=True)
            zyfa.flash_attn_func(q, k, v, causal=True, backend="reference")
        zyfa.flash_attn_func(q, k, v, causal=True)
        zyfa.flash_attn_func(q, k, v, causal=True)
    notes = [r.message for r in caplog.records if r.message.startswith("zyfa: using")]
    assert len(notes) <= 1 and all("ptx" in n for n in notes), notes


@pytest.mark.parametrize("dqk", [64, 128, 192, 256])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.slow
def test_packed_batch_kernels_assemble(dqk, causal):
    """The packed (varlen) variants: the per-sequence tables read from global memory, the same
    wgmmas as the dense kernel, a serial CTA past its sequence's queries returns at once."""
    dense = assemble(attn.attention_kernel("exact", causal, dqk=dqk)[1]).sass()
    name, ptx = attn.attention_kernel("exact", causal, dqk=dqk, packed=True)
    a = assemble(ptx)
    sass = a.sass()
    assert name.endswith("_packed") and "lse_head_stride" in ptx and "ld.global.nc.u32" in ptx
    assert sass.count("QGMMA") == dense.count("QGMMA") and sass.count("HGMMA") == dense.count("HGMMA")
    if dqk <= 128:                                 # the serial kernels: within their register budget
        cap = attn.REGISTER_CAP_D64 if dqk == 64 else attn.REGISTER_BUDGET
        assert a.spill_bytes == 0 and a.registers <= cap, a.report


@pytest.mark.parametrize("stages", [2, 3, 4, 5, 6, 7])
def test_ring_position_is_the_quotient_and_remainder(stages):
    """loads.emit_ring_position for every 32-bit n: a mask and shift for powers of two, a
    multiply-high by a magic number for 3, 5, 6 (checked here at the edges and at random), a
    division otherwise; the magic's bound is what makes it exact."""
    import random
    from zyfa.asm.ptx.loads import _division_magic
    magic = _division_magic(stages)
    if stages & (stages - 1) == 0:
        return
    if stages == 7:
        assert magic is None                       # no 32-bit magic with a small enough error
        return
    m, s = magic
    rng = random.Random(stages)
    for n in [0, 1, stages - 1, stages, 2 ** 31, 2 ** 32 - 1, 2 ** 32 - stages] + \
             [rng.getrandbits(32) for _ in range(20000)]:
        assert (n * m) >> (32 + s) == n // stages, n


# ------------------------------------------------------------- sliding windows, on an H100 / H200
WINDOW_SHAPES = [  # B, Sq, Sk, Hq, Hkv
    (1, 300, 300, 4, 2),             # odd lengths, GQA
    (2, 200, 777, 2, 1),             # seqlen_q < seqlen_k (bottom-right), MQA
    (1, 1000, 1000, 2, 2),           # several blocks each side of every window
]
WINDOWS = [  # (window_size, causal): sizes at the 128-key block's edges, one past the sequence
    ((0, 0), True), ((1, 0), True), ((127, 0), True), ((128, 0), True), ((129, 0), True), ((5000, 0), True),
    ((0, 0), False), ((1, 0), False), ((128, 129), False), ((0, 127), False), ((-1, 1), False), ((129, -1), False),
    ((5000, 5000), False)]


def _window_id(w):
    return f"{w[0][0]}_{w[0][1]}_{'causal' if w[1] else 'full'}"


@hopper
@pytest.mark.parametrize("head_dim", [64, 128, 192, 256])
@pytest.mark.parametrize("window", WINDOWS, ids=_window_id)
@pytest.mark.parametrize("shape", WINDOW_SHAPES)
def test_windowed_kernel_equals_spec_when_s_is_exact(shape, window, head_dim):
    """The windowed kernels (both edges masked, blocks outside the window skipped) against the
    spec's window (key_limits): the spec's P codes, its output within the BF16 rounding."""
    window, causal = window
    kw, _ = _exact_s_case((*shape, causal), seed=shape[1] + head_dim + max(window[0], 0), head_dim=head_dim)
    text = zyfa.explain(**kw, causal=causal, window_size=window)
    assert text.startswith("selected: ptx") and "sliding window" in text, text
    _assert_equals_spec(kw, causal, "lean_cubic", window=window)


@hopper
@pytest.mark.parametrize("long", [False, True])
@pytest.mark.parametrize("head_dim", [64, 128, 192, 256])
@pytest.mark.parametrize("window", WINDOWS[::2], ids=_window_id)
def test_windowed_running_reference_equals_spec(window, head_dim, long, monkeypatch):
    """The fast mode with a window, and d128's long-key layout (the pipelined consumers)."""
    if long and head_dim != 128:
        pytest.skip("the long layout is d128's")
    from zyfa.asm.ptx import layout
    if long:
        monkeypatch.setattr(layout, "LONG_KEYS", 1)
    window, causal = window
    kw, _ = _exact_s_case((1, 1000, 1000, 2, 2, causal), seed=head_dim + max(window[0], 0), head_dim=head_dim)
    _assert_equals_spec(kw, causal, "lean_cubic_f16", ref_rule="running", window=window)


@hopper
@pytest.mark.parametrize("ref_rule", ["block", "running"])
@pytest.mark.parametrize("head_dim", [64, 128, 192, 256])
@pytest.mark.parametrize("window,causal", [((4096, 0), True), ((128, 0), True), ((129, 255), False)])
def test_windowed_kernel_vs_float64(window, causal, head_dim, ref_rule):
    """Realistic activations, the exact rule: no further from the float64 window than the spec."""
    x, _ = _case((1, 1000, 5000, 4, 2, causal), head_dim=head_dim)
    out = zyfa.flash_attn_func(**x.kwargs(), causal=causal, p_rule="exact", ref_rule=ref_rule, window_size=window,
                               backend="ptx")
    spec = fp8_attention_spec(**x.kwargs(), causal=causal, p_rule="exact", ref_rule=ref_rule, window_size=window)
    ref = attention_fp64(*x.dequantized(), causal=causal, window_size=window)
    spec_err, rounding = rel_err(spec, ref), rel_err(spec.bfloat16(), spec)
    assert rel_err(out, ref) <= 1.1 * math.hypot(spec_err, rounding), (rel_err(out, ref), spec_err, rounding)


@hopper
@pytest.mark.parametrize("head_dim", [64, 128, 192, 256])
def test_windowed_kernel_never_reads_blocks_outside(head_dim):
    """NaN in V's first key block: a block a tile reads reaches every row of it (P = 0 times
    NaN), so rows whose whole tile lies past the window's reach of block 0 stay finite (and
    equal the clean run) only if their tiles never load it; rows that see block 0 are NaN."""
    x, _ = _case((1, 2048, 2048, 2, 1, True), head_dim=head_dim)
    clean = zyfa.flash_attn_func(**x.kwargs(), causal=True, window_size=(256, 0), backend="ptx")
    v = x.v.clone()
    v.view(torch.uint8)[:, :128] = 0x7F                      # E4M3 NaN
    kw = {**x.kwargs(), "v": v}
    out = zyfa.flash_attn_func(**kw, causal=True, window_size=(256, 0), backend="ptx")
    assert torch.isnan(out[:, :128].float()).all(dim=-1).all()
    far = 128 + 256 + 256                                    # past the reach of block 0 by a 256-row tile
    assert torch.equal(out[:, far:].view(torch.int16), clean[:, far:].view(torch.int16))


def _fp8_varlen_case(lens_q, lens_k, d, dv, seed):
    """Packed E4M3 q, k, v (V transposed, as quantize_fp8 writes it), descales a (sequence, kv
    head), and the cu_seqlens."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, sum(lens_q), 4, d, generator=g).bfloat16().cuda()
    k = torch.randn(1, sum(lens_k), 2, d, generator=g).bfloat16().cuda()
    v = torch.randn(1, sum(lens_k), 2, dv, generator=g).bfloat16().cuda()
    x = zyfa.quantize_fp8(q, k, v)
    f = torch.linspace(0.5, 2.0, len(lens_q), device="cuda")[:, None]
    ds = {n: (getattr(x, n) * f).float() for n in ("q_descale", "k_descale", "v_descale")}
    cu = lambda lens: torch.tensor([0] + list(itertools.accumulate(lens)), dtype=torch.int32)  # noqa: E731
    return x.q[0], x.k[0], x.v[0], ds, cu(lens_q), cu(lens_k)


@hopper
@pytest.mark.parametrize("dims", [(128, 128), (192, 128), (64, 64), (256, 256)], ids=lambda d: f"d{d[0]}-{d[1]}")
@pytest.mark.parametrize("window,causal", [((0, 0), True), ((129, 0), True), ((127, 128), False), ((5000, -1), False)])
@pytest.mark.parametrize("page_size", [0, 64, 256])
def test_windowed_packed_and_paged_equal_per_sequence_calls(dims, window, causal, page_size):
    """A packed batch (and its paged cache, gathered for the generated kernel) with a window in
    one launch: bit for bit the dense windowed kernel a sequence (chunked prefill: more keys
    than queries)."""
    from zyfa.varlen import paged_kv_cache
    lens_q, lens_k = [1, 200, 77, 130], [5, 260, 77, 300]
    q, k, v, ds, cu_q, cu_k = _fp8_varlen_case(lens_q, lens_k, *dims, seed=dims[0] + page_size)
    kv, extra = (k, v), dict(cu_seqlens_k=cu_k)
    if page_size:
        kp, vp, table, used = paged_kv_cache(k, v, cu_k, page_size, seed=page_size)
        kv, extra = (kp, vp), dict(cu_seqlens_k=None, block_table=table, seqused_k=used)
    out, lse = zyfa.flash_attn_varlen_func(q, *kv, cu_q, max_seqlen_q=max(lens_q), max_seqlen_k=max(lens_k),
                                           causal=causal, window_size=window, return_lse=True, backend="ptx",
                                           **extra, **ds)
    for i, (a, c) in enumerate(zip(cu_q[:-1].tolist(), cu_k[:-1].tolist())):
        sq, sk = lens_q[i], lens_k[i]
        o, s_ = zyfa.flash_attn_func(q[None, a:a + sq], k[None, c:c + sk], v[None, c:c + sk], causal=causal,
                                     window_size=window, return_lse=True, backend="ptx",
                                     **{n: d[i:i + 1] for n, d in ds.items()})
        assert torch.equal(out[a:a + sq].view(torch.int16), o[0].view(torch.int16)), (i, describe_mismatch(out[a:a + sq], o[0]))
        assert torch.equal(lse[:, a:a + sq], s_[0]), i


def test_explain_names_the_fast_modes_key_block(monkeypatch):
    """The backend's reason names the block of the fast mode's references (the spec's block_n):
    MLA's WIDE_KEYS, 128 with a window and at d128 (its long layout too)."""
    from zyfa import dispatch
    from zyfa.asm.ptx import backend
    monkeypatch.setattr(backend, "HAS_CUDA_PYTHON", True)

    def why(dqk, seqlen_k, ref_rule, window=(-1, -1)):
        p = dispatch.Problem(torch.device("cuda"), "sm90", True, (dqk, attn.fp8_dv(dqk)), True, seqlen_k, seqlen_k,
                             "exact", ref_rule, False, False, False, False, window)
        return backend.supports(p)[1]
    assert f"running max every {attn.WIDE_KEYS[192]} keys" in why(192, 8192, "running")
    assert "running max every 128 keys" in why(192, 8192, "running", (100, 0))
    assert "running max every 128 keys" in why(128, attn.LONG_KEYS, "running")
    assert "running" not in why(192, 8192, "block")
