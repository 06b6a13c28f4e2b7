"""The gfx950 (MI355X) path on the CPU: the emulator against exact arithmetic and against
Triton's own gfx950 code; the generated kernels assembled and linked by Triton's LLVM and
run in the emulator against the spec. No AMD GPU is involved anywhere.
"""
import dataclasses
import functools
import os
import struct
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
import torch

from conftest import DEVICE, HAS_GPU
from zyfa.spec.rules import p_bits
from zyfa.verify.gfx950 import emulator as E
from zyfa.asm.gfx950.lean_p import p_codes_kernel
from zyfa.spec.rules import LEAN_RULES
from zyfa.asm.gfx950.target import assemble
from zyfa.verify.gfx950.triton_reference import dot_fp8, p_codes
from zyfa.triton_kernels.p_rules import P_RULE_IDS


def _exact_fma_f32(a, b, c) -> np.float32:
    v = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    f = np.float32(float(v))
    near = [np.nextafter(f, np.float32(-np.inf)), f, np.nextafter(f, np.float32(np.inf))]
    return min(near, key=lambda x: (abs(Fraction(float(x)) - v), int(np.array(x).view(np.uint32)) & 1))


def test_fma_f32_rounds_once():
    rng = np.random.default_rng(0)
    a = rng.standard_normal(3000).astype(np.float32)
    b = rng.standard_normal(3000).astype(np.float32)
    c = (rng.standard_normal(3000) * 1e-3).astype(np.float32)
    # products that land on float32 midpoints, nudged by a tiny c: double rounding's traps
    a2 = np.full(2000, 1 + 2.0 ** -12, np.float32)
    b2 = (1 + rng.integers(0, 2 ** 11, 2000) * 2.0 ** -12).astype(np.float32)
    c2 = (rng.choice([-1, 1], 2000) * 2.0 ** -60).astype(np.float32)
    A, B, C = (np.concatenate(p) for p in ((a, a2), (b, b2), (c, c2)))
    got = E.fma_f32(A, B, C)
    want = np.array([_exact_fma_f32(*t) for t in zip(A, B, C)], np.float32)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    # and the naive float64 route really does round twice somewhere in this set
    naive = (A.astype(np.float64) * B + C).astype(np.float32)
    assert not np.array_equal(naive.view(np.uint32), want.view(np.uint32))


# ---------------------------------------------------------------- Triton's gfx950 code in the emulator
@functools.cache
def _triton_text(name: str) -> str:
    """Triton's AMDGCN for a kernel of zyfa.verify.gfx950.triton_reference, compiled in a process
    without the interpreter (it replaces @triton.jit functions when TRITON_INTERPRET=1)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-m", "zyfa.verify.gfx950.triton_reference", name], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def _gfx950(name: str) -> E.Kernel:
    return E.parse(_triton_text(name))


def _ys(n, seed):
    rng = np.random.default_rng(seed)
    y = np.concatenate([-rng.random(n - 400) * 20, -np.arange(400) / 64])   # integers, ties, the clamp
    return y.astype(np.float32)


@pytest.mark.parametrize("rule", LEAN_RULES)
@pytest.mark.slow
def test_emulator_reproduces_tritons_gfx950_lean_p(rule):
    """Triton's gfx950 compilation of its lean-P code, run in the emulator, gives the spec's
    bits (hardware FMA: fused); Triton running the same kernel here gives the spec's bits
    too (its interpreter rounds FMAs twice: the unfused spec)."""
    kernel = _gfx950(f"p_codes_{rule}")
    n = 1000                                           # not a multiple of the block: masked lanes
    y = _ys(n, seed=len(rule))
    mem = E.Memory()
    ya, oa = mem.alloc(y), mem.alloc(np.full(n, -7, np.int32))
    E.launch(kernel, mem, (4,), 256, struct.pack("<QQi4xQQ", ya, oa, n, 0, 0))
    emulated = mem.array(oa, np.int32, n)
    assert np.array_equal(emulated, p_bits(torch.from_numpy(y), rule, fused=True).numpy())
    yt = torch.from_numpy(y).to(DEVICE)
    ran = torch.empty(n, dtype=torch.int32, device=DEVICE)
    p_codes[(4,)](yt, ran, n, RULE=P_RULE_IDS[rule], BLOCK=256)
    assert torch.equal(ran.cpu(), p_bits(torch.from_numpy(y), rule, fused=HAS_GPU))


def test_emulator_runs_tritons_gfx950_loop():
    """A loop over rows (scalar compares and branches, exec save/restore, 64-bit addressing):
    the emulated column sums equal sequential float32 FMAs bit for bit."""
    kernel = _gfx950("colsum")
    rows, cols, scale = 7, 300, np.float32(0.37)
    x = np.random.default_rng(3).standard_normal((rows, cols)).astype(np.float32)
    mem = E.Memory()
    xa, oa = mem.alloc(x), mem.alloc(np.zeros(cols, np.float32))
    E.launch(kernel, mem, (3,), 128, struct.pack("<QQiif4xQQ", xa, oa, rows, cols, scale, 0, 0))
    want = np.zeros(cols, np.float32)
    for r in range(rows):
        want = E.fma_f32(x[r], np.full(cols, scale, np.float32), want)
    assert np.array_equal(mem.array(oa, np.float32, cols).view(np.uint32), want.view(np.uint32))


def test_emulator_runs_tritons_gfx950_fp8_dot():
    """Triton's FP8 dot for gfx950: byte loads, LDS writes and XOR-swizzled 128-bit reads,
    SDWA byte packing, v_bitop3/v_xad, ds_bpermute across lane halves, v_perm, one
    v_mfma_f32_32x32x64_f8f6f4 into AGPRs. With E4M3 inputs whose products and sums are exact,
    the emulated C equals A @ B bit for bit; so does Triton's own run of the kernel here."""
    kernel = _gfx950("dot_fp8")
    rng = np.random.default_rng(11)
    a = rng.integers(-8, 9, (32, 64)) / 4.0                # exact in E4M3, exact sums
    b = rng.integers(-8, 9, (64, 32)) * 2.0
    a8 = torch.from_numpy(a).to(torch.float8_e4m3fn)
    b8 = torch.from_numpy(b).to(torch.float8_e4m3fn)
    assert torch.equal(a8.double(), torch.from_numpy(a)) and torch.equal(b8.double(), torch.from_numpy(b))
    mem = E.Memory()
    pa, pb = mem.alloc(a8.view(torch.uint8).numpy()), mem.alloc(b8.view(torch.uint8).numpy())
    pc = mem.alloc(np.zeros((32, 32), np.float32))
    E.launch(kernel, mem, (1,), 64, struct.pack("<QQQQQ", pa, pb, pc, 0, 0))
    want = (a @ b).astype(np.float32)
    assert np.array_equal(mem.array(pc, np.float32, 32 * 32).reshape(32, 32), want)
    c = torch.empty(32, 32, dtype=torch.float32, device=DEVICE)
    dot_fp8[(1,)](a8.to(DEVICE), b8.to(DEVICE), c, M=32, N=32, K=64)
    assert torch.equal(c.cpu(), torch.from_numpy(want))


def test_emulator_runs_tritons_gfx950_scaled_fp8_dot():
    """Triton's scaled FP8 dot for gfx950 (128 x 64 x 256, 4 waves): E8M0 scales per row and
    32 k picked from VGPR bytes by op_sel/op_sel_hi (all four bytes used), B read from LDS with
    ds_read_b64_tr_b8, 16-bit bit operations. With scales spanning 2^-7..2^7 the emulated C
    equals, bit for bit, the float32 accumulation of the exact 64-k partial products in k order
    (one rounding per MFMA); moving one scale moves exactly the column it scales."""
    kernel = _gfx950("dot_scaled_fp8")
    M, N, K = 128, 64, 256
    rng = np.random.default_rng(5)
    a = rng.integers(-8, 9, (M, K)) / 4.0
    b = rng.integers(-8, 9, (K, N)) * 2.0
    sa = rng.integers(120, 135, (M, K // 32)).astype(np.uint8)
    sb = rng.integers(120, 135, (N, K // 32)).astype(np.uint8)
    a8 = torch.from_numpy(a).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    b8 = torch.from_numpy(b).to(torch.float8_e4m3fn).view(torch.uint8).numpy()

    def run(sa, sb):
        mem = E.Memory()
        ptrs = [mem.alloc(x) for x in (a8, sa, b8, sb, np.zeros((M, N), np.float32))]
        E.launch(kernel, mem, (1,), 256, struct.pack("<7Q", *ptrs, 0, 0))
        return mem.array(ptrs[-1], np.float32, M * N).reshape(M, N)

    def want(sa, sb):
        A = a * np.repeat(np.exp2(sa - 127.0), 32, axis=1)
        B = b * np.repeat(np.exp2(sb - 127.0), 32, axis=1).T
        c = np.zeros((M, N), np.float32)
        for k0 in range(0, K, 64):
            c = (A[:, k0:k0 + 64] @ B[k0:k0 + 64] + c.astype(np.float64)).astype(np.float32)
        return c

    assert np.array_equal(run(sa, sb).view(np.uint32), want(sa, sb).view(np.uint32))
    moved = sb.copy()
    moved[5, 3] += 4                                        # column 5, k 96-127 scaled by 16 more
    got, expect = run(sa, moved), want(sa, moved)
    assert np.array_equal(got, expect) and not np.array_equal(got[:, 5], want(sa, sb)[:, 5])


@pytest.mark.parametrize("shape", [(1, 100, 150, 2, 1, 64, 64, True), (2, 33, 33, 1, 1, 64, 64, True)])
@pytest.mark.slow
def test_emulator_runs_tritons_gfx950_fp8_attention(shape):
    """zyfa's own Triton FP8 attention kernel as Triton compiles it for gfx950 (~4,200
    instructions: buffer loads from tensor descriptors, FP8 MFMAs, ds_read_b64_tr_b8, DPP and
    permlane row reductions, lean P, FP8 -> float32 row sums, IEEE division, bf16 stores; 4
    waves sharing LDS, checked for races) run in the emulator on small-integer inputs: the
    output is the spec's (fused FMAs, as the hardware) rounded to bfloat16, the LSE the spec's,
    and it agrees with Triton running the same kernel here (its interpreter, or a GPU)."""
    from zyfa.verify.gfx950.triton_reference import ATTENTION, emulate_triton_attention
    from zyfa.spec.reference import fp8_attention_spec
    from zyfa.triton_kernels.launch import triton_attention
    from zyfa.triton_kernels.tuning import TileConfig
    kw = _small_int_case(shape, seed=shape[1])
    out, lse = emulate_triton_attention(_triton_text("attention_fp8"), **kw)
    spec, lse_spec = fp8_attention_spec(**kw, causal=True, p_rule=ATTENTION["p_rule"], block_n=ATTENTION["block_n"],
                                        return_lse=True)
    rounding = ((spec.bfloat16().double() - spec).norm() / spec.norm()).item()
    assert ((out.double() - spec).norm() / spec.norm()).item() <= 1.01 * rounding
    assert (lse.double() - lse_spec).abs().max().item() < 1e-5
    config = TileConfig(ATTENTION["block_m"], ATTENTION["block_n"], ATTENTION["num_warps"], ATTENTION["num_stages"])
    ran, ran_lse = triton_attention(**{k: t.to(DEVICE) for k, t in kw.items()}, causal=True,
                                    p_rule=ATTENTION["p_rule"], config=config)      # the interpreter, or the GPU
    assert ((out.double() - ran.cpu().double()).norm() / spec.norm()).item() <= 3 * rounding
    assert (lse - ran_lse.cpu()).abs().max().item() < 1e-4


# ---------------------------------------------------------------- zyfa's generated gfx950 kernels
@pytest.mark.parametrize("rule", LEAN_RULES)
def test_generated_gfx950_p_codes_assemble_and_equal_the_spec(rule):
    name, text = p_codes_kernel(rule)
    hsaco = assemble(text)
    assert hsaco[:4] == b"\x7fELF" and name.encode() in hsaco
    assert "v_exp_f32" not in text and "v_cvt_i32" not in text and "v_cvt_u32" not in text
    n = 4 * 700
    y = _ys(n, seed=7)
    mem = E.Memory()
    ya, oa = mem.alloc(y), mem.alloc(np.zeros(n, np.uint8))
    E.launch(E.parse(text, name), mem, ((n // 4 + 255) // 256,), 256, struct.pack("<QQI", ya, oa, n // 4))
    codes = mem.array(oa, np.uint8, n).astype(np.int32)
    assert np.array_equal(codes, p_bits(torch.from_numpy(y), rule, fused=True).numpy())


def test_assembler_enforces_gfx9_operand_rules():
    name, text = p_codes_kernel("lean")
    bad = text.replace("s_endpgm", "v_fmaak_f32 v1, s4, v2, 0x41000000\n\ts_endpgm")   # SGPR + literal
    with pytest.raises(RuntimeError, match="constant bus"):
        assemble(bad)


def test_emulator_refuses_what_it_does_not_know():
    name, text = p_codes_kernel("lean")
    kernel = E.parse(text.replace("s_endpgm", "v_sin_f32_e32 v1, v2\n\ts_endpgm"), name)
    mem = E.Memory()
    ya, oa = mem.alloc(np.zeros(4, np.float32)), mem.alloc(np.zeros(4, np.uint8))
    with pytest.raises(NotImplementedError, match="v_sin_f32"):
        E.launch(kernel, mem, (1,), 256, struct.pack("<QQI", ya, oa, 1))


# ---------------------------------------------------------------- the runtime side, short of a device
def test_kernel_args_come_from_the_code_objects_metadata():
    from zyfa.asm.gfx950.loader import kernel_args, pack
    name, text = p_codes_kernel("lean")
    args, size = kernel_args(text, name)
    assert [(a.offset, a.size, a.kind) for a in args] == [(0, 8, "global_buffer"), (8, 8, "global_buffer"),
                                                          (16, 4, "by_value")] and size == 24
    assert pack(args, size, [0x1000, 0x2000, 7]) == struct.pack("<QQI4x", 0x1000, 0x2000, 7)
    text = _triton_text("colsum")                         # LLVM's metadata: keys in another order
    args, size = kernel_args(text, "colsum")
    assert [(a.offset, a.size) for a in args][:5] == [(0, 8), (8, 8), (16, 4), (20, 4), (24, 4)]
    assert pack(args, size, [1, 2, 3, 4, 0.5, 0, 0]) == struct.pack("<QQiif4xQQ", 1, 2, 3, 4, 0.5, 0, 0)
    assert E.parse(text).kernarg_size == size


class _FakeHip:
    """Stands in for libamdhip64: records what the loader hands the runtime."""

    def __init__(self):
        self.launches = []

    def hipModuleLoadData(self, module, image):
        module._obj.value = 0x1234
        self.image = bytes(image)
        return 0

    def hipModuleGetFunction(self, function, module, name):
        function._obj.value = 0x5678
        self.name = name
        return 0

    def hipModuleLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shared, stream, params, config):
        import ctypes
        size = ctypes.cast(config[3], ctypes.POINTER(ctypes.c_size_t)).contents.value
        self.launches.append(((gx, gy, gz), (bx, by, bz), ctypes.string_at(config[1], size)))
        return 0


def test_hip_loader_passes_the_code_object_and_packed_kernargs():
    from zyfa.asm.gfx950.loader import HipError, HipKernel, kernel_args
    name, text = p_codes_kernel("lean_cubic")
    hsaco = assemble(text)
    fake = _FakeHip()
    kernel = HipKernel(hsaco, name, *kernel_args(text, name), lib=fake)
    assert fake.image.startswith(hsaco) and fake.name == name.encode()
    kernel((5,), (256,), [0x10, 0x20, 1000])
    assert fake.launches == [((5, 1, 1), (256, 1, 1), struct.pack("<QQI4x", 0x10, 0x20, 1000))]
    fake.hipModuleLaunchKernel = lambda *a: 98               # hipErrorInvalidDeviceFunction
    with pytest.raises(HipError, match="hipModuleLaunchKernel failed"):
        kernel((1,), (256,), [0, 0, 0])
    with pytest.raises(ValueError, match="takes 3 arguments"):
        kernel((1,), (256,), [0, 0])


def test_hip_runtime_missing_is_a_clear_error():
    from zyfa.asm.gfx950.loader import hip_runtime
    with pytest.raises(ImportError, match="HIP runtime"):
        hip_runtime("/nonexistent/libamdhip64.so")


def test_generated_gfx950_qk_tile_equals_float64():
    """zyfa's own MFMA code: operands loaded straight into the layout the emulator took from
    Triton's code, one v_mfma_f32_32x32x64_f8f6f4, the accumulator layout for the stores."""
    from zyfa.asm.gfx950.loader import kernel_args, pack
    from zyfa.verify.gfx950.qk_tile import qk_tile_kernel
    name, text = qk_tile_kernel()
    assert assemble(text)[:4] == b"\x7fELF"
    rng = np.random.default_rng(5)
    q = rng.integers(-6, 7, (32, 64)) / 2.0              # exact in E4M3; exact sums
    k = rng.integers(-6, 7, (32, 64)) * 1.0
    q8 = torch.from_numpy(q).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    k8 = torch.from_numpy(k).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    mem = E.Memory()
    pq, pk, ps = mem.alloc(q8), mem.alloc(k8), mem.alloc(np.zeros((32, 32), np.float32))
    E.launch(E.parse(text, name), mem, (1,), 64, pack(*kernel_args(text, name), [pq, pk, ps]))
    s = mem.array(ps, np.float32, 32 * 32).reshape(32, 32)
    assert np.array_equal(s, (q @ k.T).astype(np.float32))
    # a transposed or mis-laid operand would not survive: the emulated MFMA is layout-exact
    assert not np.array_equal(s, (q @ k.T).T.astype(np.float32))


GFX950_SHAPES = [  # B, Sq, Sk, Hq, Hkv, D, Dv, causal
    (1, 32, 64, 1, 1, 64, 32, False),      # one block, one tile
    (1, 40, 200, 2, 1, 128, 128, True),    # seqlen_q < seqlen_k (bottom-right), GQA, a key tail
    (1, 100, 100, 1, 1, 128, 128, True),   # several query tiles on the diagonal
    (1, 70, 130, 1, 1, 64, 64, False),     # non-causal with tails
    (2, 1, 45, 2, 2, 128, 128, True),      # one query row, batch 2
    (1, 48, 96, 2, 2, 192, 128, True),     # MLA head dims
    (1, 300, 420, 1, 1, 64, 64, True),     # two workgroups, 7 blocks: the buffers turn over
]


def _small_int_case(shape, seed):
    B, Sq, Sk, Hq, Hkv, D, Dv, causal = shape
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(-3, 4, (B, Sq, Hq, D), generator=g).float().to(torch.float8_e4m3fn)
    k = torch.randint(-3, 4, (B, Sk, Hkv, D), generator=g).float().to(torch.float8_e4m3fn)
    v = (torch.randn(B, Sk, Hkv, Dv, generator=g) * 32).to(torch.float8_e4m3fn)
    qd, kd = 0.25 + torch.rand(B, Hkv, generator=g), 0.5 + torch.rand(B, Hkv, generator=g)
    return dict(q=q, k=k, v=v, q_descale=qd, k_descale=kd, v_descale=torch.rand(B, Hkv, Dv, generator=g) / 32)


@pytest.mark.parametrize("ref_rule", ["block", "block_pow2"])
@pytest.mark.parametrize("rule", LEAN_RULES)
@pytest.mark.parametrize("shape", GFX950_SHAPES)
@pytest.mark.slow
def test_generated_gfx950_attention_equals_the_spec(shape, rule, ref_rule):
    """The whole per-block algorithm (block_n = 64) on the emulated matrix cores, 8 waves in
    ping-pong over double-buffered LDS (the emulator would raise on a race between barriers):
    S^T by MFMA, masks, lane-pair row max, lazy reference, lean P of y = fma(S, c, -r) packed
    into the P.V MFMA, row sums by MFMA, LSE; block: two-level accumulation; block_pow2: the
    block weight applied by the scaled MFMA's E8M0 operand. The emulated MFMA sums exactly, so
    the P codes equal the spec's and the output is the spec's up to float32 rounding (one P
    code off would show as ~1e-3)."""
    from zyfa.asm.gfx950.attention import attention_kernel
    from zyfa.verify.gfx950.attention import emulate_attention
    from zyfa.spec.reference import fp8_attention_spec
    causal = shape[-1]
    text = attention_kernel(rule, causal, shape[5], shape[6], ref_rule)[1]
    assert assemble(text)[:4] == b"\x7fELF"
    # exp2 only for a block's factors (alpha, and beta unless the MFMA scales); no per-score conversion
    assert text.count("v_exp_f32") == (1 if ref_rule == "block_pow2" else 2)
    assert text.count("v_cvt") == (1 if ref_rule == "block_pow2" else 0)    # the block's scale byte
    assert ("v_mfma_scale" in text) == (ref_rule == "block_pow2")
    kw = _small_int_case(shape, seed=shape[1] + len(rule))
    out, lse = emulate_attention(**kw, causal=causal, p_rule=rule, ref_rule=ref_rule)
    spec, lse_spec = fp8_attention_spec(**kw, causal=causal, p_rule=rule, ref_rule=ref_rule, block_n=64,
                                        return_lse=True)
    assert ((out.double() - spec).norm() / spec.norm()).item() < 1e-6
    assert (lse.double() - lse_spec).abs().max().item() < 1e-5


def test_emulator_requires_the_waits_hardware_needs():
    """Loads complete at issue in the emulator; the wait check makes a missing s_waitcnt an
    error anyway: using a load's destination before the wait, and a barrier passed with an
    LDS write outstanding. The same code with its waits runs."""
    def run(body):
        text = "\n".join(["k:", "v_mov_b32_e32 v1, 0", *body, "s_endpgm"])
        E.launch(E.parse(text, "k"), E.Memory(), (1,), 64, b"")
    run(["ds_read_b128 v[4:7], v1", "s_waitcnt lgkmcnt(0)", "v_mov_b32_e32 v8, v4"])
    with pytest.raises(E.WaitError, match="still writing"):
        run(["ds_read_b128 v[4:7], v1", "v_mov_b32_e32 v8, v4"])
    with pytest.raises(E.WaitError, match="still writing"):       # nor may anything overwrite it
        run(["ds_read_b128 v[4:7], v1", "ds_read_b32 v9, v1", "s_waitcnt lgkmcnt(1)", "v_mov_b32_e32 v9, 0"])
    run(["ds_read_b128 v[4:7], v1", "ds_read_b32 v9, v1", "s_waitcnt lgkmcnt(1)", "v_mov_b32_e32 v8, v4"])
    with pytest.raises(E.WaitError, match="s_barrier"):
        run(["ds_write_b32 v1, v1", "s_barrier"])
    run(["ds_write_b32 v1, v1", "s_waitcnt lgkmcnt(0)", "s_barrier"])


@pytest.mark.parametrize("after", ["ds_bpermute_b32", "ds_read_b128", "ds_write_b128", "global_load_dwordx4"])
def test_generated_kernel_needs_each_of_its_waits(after, monkeypatch):
    """Drop the first s_waitcnt that follows each kind of memory instruction in zyfa's kernel
    loop: the emulator refuses it (all 23 of the kernel's waits but one redundant prologue
    wait are needed this way)."""
    from zyfa.verify.gfx950 import attention as AT
    name, text = AT.attention_kernel("lean_cubic", True, 128, 128, "block_pow2")
    lines = text.splitlines()
    first = next(i for i in range(lines.index(".Lblock:"), len(lines)) if lines[i].strip().startswith(after))
    wait = next(i for i in range(first, len(lines)) if lines[i].strip().startswith("s_waitcnt"))
    mutated = "\n".join(ln for i, ln in enumerate(lines) if i != wait)
    monkeypatch.setattr(AT, "attention_kernel", lambda *a, **k: (name, mutated))
    with pytest.raises(E.WaitError):
        AT.emulate_attention(**_small_int_case((1, 40, 200, 1, 1, 128, 128, True), seed=3), causal=True,
                             ref_rule="block_pow2")


@pytest.mark.parametrize("barrier", [0, 1])
def test_emulator_catches_the_race_a_missing_barrier_makes(barrier, monkeypatch):
    """Drop either barrier of the generated kernel's loop: waves then read K/V^T bytes other
    waves are writing in the same interval, and the emulator refuses instead of answering."""
    from zyfa.verify.gfx950 import attention as AT
    name, text = AT.attention_kernel("lean_cubic", True, 128, 128, "block_pow2")
    lines = text.splitlines()
    loop = lines.index(".Lblock:")
    barriers = [i for i in range(loop, len(lines)) if lines[i].strip() == "s_barrier"]
    mutated = "\n".join(ln for i, ln in enumerate(lines) if i != barriers[barrier])
    monkeypatch.setattr(AT, "attention_kernel", lambda *a, **k: (name, mutated))
    with pytest.raises(E.LdsRaceError):
        AT.emulate_attention(**_small_int_case((1, 40, 200, 1, 1, 128, 128, True), seed=3), causal=True,
                             ref_rule="block_pow2")


def test_generated_gfx950_attention_on_realistic_activations():
    from zyfa.activations import make
    from zyfa.verify.gfx950.attention import emulate_attention
    from zyfa.spec.reference import attention_fp64, fp8_attention_spec
    import zyfa
    q, k, v = make("realistic", 1, 96, 4, 2, 128, seed=5)
    x = zyfa.quantize_fp8(q, k, v)
    out, lse = emulate_attention(**x.kwargs())
    spec = fp8_attention_spec(**x.kwargs(), p_rule="lean_cubic", block_n=64)
    ref = attention_fp64(*x.dequantized())
    assert ((out.double() - spec).norm() / spec.norm()).item() < 1e-6
    spec_err = ((spec - ref).norm() / ref.norm()).item()
    assert ((out.double() - ref).norm() / ref.norm()).item() <= 1.0001 * spec_err


def test_permuted_vt_puts_every_key_once_per_block():
    from zyfa.spec.key_order import gfx950_vt, key_of_byte
    assert sorted(key_of_byte(h, j) for h in (0, 1) for j in range(32)) == list(range(64))
    v = np.arange(100 * 3, dtype=np.int64).reshape(100, 3) % 251 + 1
    vt = gfx950_vt(torch.from_numpy(v.astype(np.uint8))).numpy()
    assert vt.shape == (3, 128)
    for block in (0, 1):
        for h in (0, 1):
            for j in range(32):
                key = 64 * block + key_of_byte(h, j)
                want = v[key] if key < 100 else np.zeros(3)
                assert np.array_equal(vt[:, 64 * block + 32 * h + j], want)
    # leading (batch, head) dims: each slice permuted on its own
    batched = torch.randint(0, 256, (2, 3, 100, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    stacked = torch.stack([torch.stack([gfx950_vt(batched[b, h]) for h in range(3)]) for b in range(2)])
    assert torch.equal(gfx950_vt(batched), stacked)


# ---------------------------------------------------------------- dispatch and runtime on a faked MI355X
def test_dispatch_selects_gfx950_on_a_faked_mi355x(monkeypatch):
    from zyfa import dispatch
    from zyfa.asm.gfx950 import backend
    problem = dispatch.Problem(device=torch.device("cuda", 0), arch="gfx950", is_fp8=True, head_dims=(128, 128),
                               causal=True, seqlen_q=4096, seqlen_k=4096, p_rule="lean_cubic", ref_rule="block")
    monkeypatch.setattr(torch.version, "hip", "6.4.0", raising=False)
    monkeypatch.setattr(backend, "HAS_HIP_RUNTIME", True)
    assert dispatch.select(problem).name == "gfx950"
    assert dispatch.select(dataclasses.replace(problem, ref_rule="block_pow2")).name == "gfx950"
    for other, why in ((dict(arch="gfx942"), "targets gfx950"), (dict(is_fp8=False), "FP8 only"),
                       (dict(ref_rule="running"), "ref_rule"), (dict(p_rule="lean_cubic_f16"), "p_rule"),
                       (dict(p_rule="exact"), "p_rule"), (dict(per_token_descales=True), "per-token"),
                       (dict(head_dims=(96, 128)), "head dims"), (dict(head_dims=(256, 256)), "head dims")):
        ok, reason = backend.supports(dataclasses.replace(problem, **other))
        assert not ok and why in reason, reason
    monkeypatch.setattr(backend, "HAS_HIP_RUNTIME", False)
    ok, reason = backend.supports(problem)
    assert not ok and "HIP runtime" in reason
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    assert not backend.supports(problem)[0]


class _EmulatedHip(_FakeHip):
    """A HIP runtime whose launches run the kernel's assembly in the emulator, on the memory
    the kernel arguments point to (CPU tensors stand in for device memory)."""

    def hipModuleLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shared, stream, params, config):
        import ctypes
        import re
        from zyfa.asm.gfx950.attention import attention_kernel
        size = ctypes.cast(config[3], ctypes.POINTER(ctypes.c_size_t)).contents.value
        kernargs = ctypes.string_at(config[1], size)
        rule, ref_rule, dim, vdim, mode = re.match(r"zyfa_attn_gfx950_(lean\w*?)_(block\w*?)_d(\d+)_(\d+)_(causal|full)$",
                                                   self.name.decode()).groups()
        name, text = attention_kernel(rule, mode == "causal", int(dim), int(vdim), ref_rule)
        E.launch(E.parse(text, name), E.HostMemory(), (gx, gy, gz), bx, kernargs)
        self.launches.append(((gx, gy, gz), bx))
        return 0


def test_gfx950_backend_runs_through_the_hip_loader(monkeypatch):
    """flash_attn's gfx950 path up to the device: the V^T permutation of every head, the device
    tables of c, v descales and kv heads, kernel arguments packed from the metadata, one launch
    for every head; the fake runtime executes the assembly."""
    from zyfa.asm.gfx950 import kernels
    from zyfa.spec.reference import fp8_attention_spec
    fake = _EmulatedHip()
    monkeypatch.setattr(kernels, "hip_runtime", lambda: fake)
    kernels._kernel.cache_clear()
    try:
        kw = _small_int_case((1, 40, 100, 2, 1, 128, 128, True), seed=9)
        out, lse = kernels.attention_fp8(**kw, causal=True, p_rule="lean_cubic", ref_rule="block_pow2")
    finally:
        kernels._kernel.cache_clear()
    spec, lse_spec = fp8_attention_spec(**kw, causal=True, p_rule="lean_cubic", ref_rule="block_pow2", block_n=64,
                                        return_lse=True)
    assert out.dtype == torch.bfloat16 and out.shape == (1, 40, 2, 128)
    rounding = ((spec.bfloat16().double() - spec).norm() / spec.norm()).item()
    assert ((out.double() - spec).norm() / spec.norm()).item() <= 1.5 * rounding
    assert (lse.double() - lse_spec).abs().max().item() < 1e-5
    assert fake.launches == [((1, 2, 1), 512)]                  # one launch: a workgroup of 8 waves a head


# ---------------------------------------------------------------- the cycle model
def test_cycle_model_reproduces_zyfas_arithmetic_and_counts_the_generated_loop():
    from zyfa.verify.gfx950 import cycle_model as C
    published = C.zyfa_published()
    assert (published["exact"].matrix, published["exact"].vector, published["lean"].vector) == (1024, 896, 384)
    for ref_rule in ("block", "block_pow2"):
        phases = C.zyfa_generated("lean_cubic", ref_rule)
        # two phases a pass: every MFMA in the first (the GEMMs' 16 per step, plus one row-sum
        # MFMA per 64-key block; ZYFA's 1,024 counts the GEMMs), the softmax in the second
        assert len(phases) == 2 and phases[0].matrix == (16 + 2) * 64 and phases[1].matrix == 0
        assert phases[1].vector > phases[0].vector
        total = C._total(phases)
        assert 0 < total.busy_serial() <= C.busy_phased(phases) <= total.busy_pingpong() <= 1
    # the scaled MFMA takes the per-element multiply-add of two-level accumulation off the loop
    assert C._total(C.zyfa_generated("lean", "block_pow2")).vector < C._total(C.zyfa_generated("lean", "block")).vector
    text = "\n".join([".Lblock:", "v_mfma_f32_32x32x64_f8f6f4 v[0:15], v[16:23], v[24:31], 0",
                      "s_cbranch_scc1 .Lskip", "v_mov_b32 v1, v2", ".Lskip:", "s_cbranch_scc0 .Lkept",
                      "v_mov_b32 v1, v2", ".Lkept:", "s_barrier",
                      "v_pk_fma_f32 v[0:1], v[2:3], v[4:5], v[6:7]", "v_exp_f32_e32 v1, v2", "ds_read_b128 v[4:7], v1",
                      "s_nop 3", "s_barrier", "s_add_u32 s0, s0, 1", "s_cbranch_scc1 .Lblock"])
    first, second = C.loop_phases(text, taken=(".Lskip",))
    assert (first.matrix, first.vector, first.scalar) == (64, 4, 1 + 1 + 1 + 1)   # the skipped mov not counted;
    assert (second.vector, second.lds, second.scalar) == (4 + 8, 4, 4)            # the tail joins phase one
    assert C.busy_phased([first, second]) == 64 / max(64 + 8, 0 + 20, 64 + 0, 8 + 20)
    report = C.report()
    assert "86%" in report and "zyfa gfx950 lean_cubic, block_pow2" in report


@pytest.mark.parametrize("d", [0, 1, 31, 62, 63])
def test_generated_gfx950_causal_residues(d):
    """Causal bounds at a few residues of seqlen_k - seqlen_q modulo the 64-key block (the
    last ones next to a block multiple), with a non-default softmax_scale: the spec's output."""
    from zyfa.verify.gfx950.attention import emulate_attention
    from zyfa.spec.reference import fp8_attention_spec
    shape = (1, 40, 40 + d, 1, 1, 64, 64, True)
    kw = _small_int_case(shape, seed=100 + d)
    for scale in (None, 0.05):
        out, lse = emulate_attention(**kw, causal=True, softmax_scale=scale)
        spec, lse_spec = fp8_attention_spec(**kw, causal=True, softmax_scale=scale, p_rule="lean_cubic", block_n=64,
                                            return_lse=True)
        assert ((out.double() - spec).norm() / spec.norm()).item() < 1e-6, (d, scale)
        assert (lse.double() - lse_spec).abs().max().item() < 1e-5, (d, scale)
