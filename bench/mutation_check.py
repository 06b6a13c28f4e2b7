"""Mutation check: does the CPU test suite notice small deliberate bugs?

Each mutation is (file, exact original text, replacement, the pytest selection that must
fail). One at a time, the working tree (tracked and untracked, non-ignored files) is copied to
a temporary directory, the mutation is applied there (the original text must occur exactly
once), and the selection runs against the copy with a timeout. The working tree itself is
never edited. A mutation is *killed* when the selection fails, *SURVIVED* when it passes.

    python bench/mutation_check.py               # all, 2 at a time; writes bench/mutation_report.md
    python bench/mutation_check.py -k triton -j 1
    python bench/mutation_check.py --baseline    # the selections on the unmutated tree must pass

Run on demand (minutes: each selection is a few CPU tests), not in CI.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "bench" / "mutation_report.md"


@dataclasses.dataclass(frozen=True)
class Mutation:
    name: str
    file: str
    original: str
    replacement: str
    selection: tuple          # pytest arguments (node ids, -k expressions)


T = "tests/test_triton_kernels.py"
M = Mutation
MUTATIONS = [
    # ------------------------------------------------------------ spec
    M("cubic coefficient a +0.1%", "zyfa/spec/rules.py", "LEAN_CUBIC_A = _f32(0.3048215)",
      "LEAN_CUBIC_A = _f32(0.3051263)", ("tests/test_rule_steps.py::test_lean_rule_constants_pinned",)),
    M("cubic coefficient b +0.1%", "zyfa/spec/rules.py", "LEAN_CUBIC_B = _f32(0.0776252)",
      "LEAN_CUBIC_B = _f32(0.0777028)", ("tests/test_rule_steps.py::test_lean_rule_constants_pinned",)),
    M("quadratic coefficient k +0.1%", "zyfa/spec/rules.py", "LEAN_QUAD_K = _f32(0.345)",
      "LEAN_QUAD_K = _f32(0.345345)", ("tests/test_rule_steps.py::test_lean_rule_constants_pinned",)),
    M("lazy-reference threshold 8 -> 9", "zyfa/spec/constants.py", "RESCALE_THRESHOLD = 8.0",
      "RESCALE_THRESHOLD = 9.0", ("tests/test_reference.py::test_spec_lazy_reference_by_hand",)),
    M("spec: reference moves at >= threshold + 1", "zyfa/spec/reference.py",
      "A_new = torch.where(m > A + rescale_threshold, m, A)",
      "A_new = torch.where(m > A + rescale_threshold + 1, m, A)",
      ("tests/test_reference.py::test_spec_lazy_reference_by_hand",)),
    M("NEG_FLOOR -> -inf", "zyfa/spec/constants.py", "NEG_FLOOR = -1.0e30", 'NEG_FLOOR = float("-inf")',
      ("tests/test_reference.py::test_spec_with_exact_p_and_no_rounding_is_attention",)),
    M("P offset 2^(y+8) -> 2^(y+7)", "zyfa/spec/constants.py", "P_OFFSET_LOG2 = 8 ", "P_OFFSET_LOG2 = 7 ",
      ("tests/test_rule_steps.py::test_spec_runs_the_steps_to_codes_near_exp2",)),
    M("spec LSE offset off by one", "zyfa/spec/reference.py", "torch.log2(l) - P_OFFSET_LOG2)",
      "torch.log2(l) - P_OFFSET_LOG2 + 1)", ("tests/test_reference.py::test_spec_with_exact_p_and_no_rounding_is_attention",)),
    M("spec row sum without the block factor", "zyfa/spec/reference.py", "l = l * alpha + p.sum(-1) * beta",
      "l = l * alpha + p.sum(-1)", (T + "::test_lazy_reference_moves",)),
    M("spec two-level accumulation without beta", "zyfa/spec/reference.py",
      "torch.einsum(\"bhij,bhjd->bhid\", p, vv[:, :, k0:k1]) * beta[..., None]",
      "torch.einsum(\"bhij,bhjd->bhid\", p, vv[:, :, k0:k1])", (T + "::test_lazy_reference_moves",)),
    M("GQA: kv heads interleaved instead of grouped", "zyfa/spec/reference.py",
      "return x.permute(0, 2, 1, 3).repeat_interleave(group, dim=1)", "return x.permute(0, 2, 1, 3).repeat(1, group, 1, 1)",
      ("tests/test_reference.py::test_fp64_matches_sdpa",)),
    M("causal limit off by one", "zyfa/spec/reference.py", "torch.arange(seqlen_q, device=device) + (seqlen_k - seqlen_q)",
      "torch.arange(seqlen_q, device=device) + (seqlen_k - seqlen_q) + 1", ("tests/test_reference.py::test_fp64_matches_sdpa",)),
    M("block_pow2: ceil for floor", "zyfa/spec/reference.py", "A_new - torch.floor(A_new - m)",
      "A_new - torch.ceil(A_new - m)", (T + "::test_fp8_reference_rules",)),
    M("hopper key order: slots not permuted", "zyfa/spec/key_order.py",
      "KEY_OF_SLOT = tuple(8 * ((s % 4) // 2) + 2 * (s // 4) + s % 2 for s in range(HOPPER_GROUP))",
      "KEY_OF_SLOT = tuple(s for s in range(HOPPER_GROUP))",
      ("tests/test_ptx_attention.py::test_p_sources_put_each_code_where_the_a_operand_reads_it",
       "tests/test_ptx_attention.py::test_hopper_vt_places_keys_in_their_slots")),
    M("hopper V^T: keys not permuted within groups", "zyfa/spec/key_order.py",
      "permute(0, 5, 6, 1, 3, 2, 4)", "permute(0, 5, 6, 1, 2, 3, 4)",
      (T + "::test_wgmma_key_order_changes_only_summation_order",)),
    # ------------------------------------------------------------ Triton kernel
    M("triton: causal band start off by one", "zyfa/triton_kernels/attention.py",
      "first_row_limit = start_m + (Sk - Sq) + 1", "first_row_limit = start_m + (Sk - Sq) + 2",
      (T + "::test_causal_every_residue",)),
    M("triton: causal band end off by one", "zyfa/triton_kernels/attention.py",
      "band_end = tl.minimum(start_m + BLOCK_M + (Sk - Sq), Sk)", "band_end = tl.minimum(start_m + BLOCK_M - 1 + (Sk - Sq), Sk)",
      (T + "::test_causal_every_residue",)),
    M("triton: softmax_scale ignored", "zyfa/triton_kernels/launch.py",
      "scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)", "scale = 1.0 / math.sqrt(D)",
      (T + "::test_softmax_scale",)),
    M("triton: skips the rescale after the first block", "zyfa/triton_kernels/attention.py",
      "moved = tl.max(A_new - A, 0) > 0", "moved = tl.max(A_new - A, 0) > 1e29", (T + "::test_lazy_reference_moves",)),
    M("triton: row sum without the block factor", "zyfa/triton_kernels/attention.py",
      "l_sum = l_sum + l_blk * beta", "l_sum = l_sum + l_blk", (T + "::test_lazy_reference_moves",)),
    M("triton: GQA head mapping", "zyfa/triton_kernels/attention.py", "kvh = h // (Hq // Hkv)", "kvh = h % Hkv",
      (T + "::test_fp8_kernel_vs_spec",)),
    M("triton: FP16 path rounds P to bf16", "zyfa/triton_kernels/attention.py",
      "total = _dot(p.to(v.dtype), v, total * alpha[:, None], UPCAST_DOT)",
      "total = _dot(p.to(tl.bfloat16), v, total * alpha[:, None], UPCAST_DOT)", (T + "::test_half_kernel_vs_fp64",)),
    M("triton: ln 2 to 4 digits in the LSE", "zyfa/triton_kernels/attention.py",
      "_LN2: tl.constexpr = tl.constexpr(C.LN2)", "_LN2: tl.constexpr = tl.constexpr(0.6931)", (T + "::test_half_kernel_vs_fp64",)),
    M("triton: exact rule's subnormal threshold", "zyfa/triton_kernels/p_rules.py", "tl.where(x < 0.015625, sub, normal)",
      "tl.where(x < 0.0078125, sub, normal)", ("tests/test_rule_steps.py::test_triton_codes_equal_the_spec_in_the_interpreter",)),
    M("triton: wgmma key order not applied to P", "zyfa/triton_kernels/attention.py",
      ".permute(0, 1, 3, 2, 4).reshape(p.shape[0], p.shape[1])", ".permute(0, 1, 2, 3, 4).reshape(p.shape[0], p.shape[1])",
      (T + "::test_wgmma_key_order_changes_only_summation_order",)),
    # ------------------------------------------------------------ PTX generator
    M("ptx: half-pair byte permute", "zyfa/asm/ptx/lean_p.py", 'PACK_HALF_PAIRS = "0x6420"', 'PACK_HALF_PAIRS = "0x6402"',
      ("tests/test_ptx_evaluate.py",)),
    M("ptx: pack4 permute immediate", "zyfa/asm/ptx/lean_p.py", 'prog.emit("prmt.b32", packed, lo, hi, "0x5410")',
      'prog.emit("prmt.b32", packed, lo, hi, "0x5401")', ("tests/test_ptx_evaluate.py",)),
    M("ptx: f32 immediate one ulp up", "zyfa/asm/ptx/target.py",
      'return "0f%08X" % struct.unpack("<I", struct.pack("<f", x))[0]',
      'return "0f%08X" % (struct.unpack("<I", struct.pack("<f", x))[0] + (x == 8.0))',
      ("tests/test_ptx_evaluate.py",)),
    M("ptx: half2 constant low half", "zyfa/asm/ptx/lean_p.py", 'return f"0x{bits << 16 | bits:08x}"',
      'return f"0x{bits << 16 | (bits + (bits == 0x4800)):08x}"', ("tests/test_ptx_evaluate.py",)),
    M("ptx: exact pair operands swapped", "zyfa/asm/ptx/lean_p.py", 'prog.emit("cvt.e4m3x2.f32", pair, e_hi, e_lo)',
      'prog.emit("cvt.e4m3x2.f32", pair, e_lo, e_hi)', ("tests/test_ptx_evaluate.py",)),
    M("ptx: sub emitted as add", "zyfa/asm/ptx/lean_p.py", '"sub": "sub.f32", "fma": "fma.f32"}',
      '"sub": "add.f32", "fma": "fma.f32"}', ("tests/test_ptx_evaluate.py",)),
    # ------------------------------------------------------------ gfx950 generator
    M("gfx950: inner overwrites f (step register mapping)", "zyfa/asm/gfx950/lean_p.py",
      '"slope": 4, "base": 5, "inner": 2}', '"slope": 4, "base": 5, "inner": 3}',
      ("tests/test_gfx950.py::test_generated_gfx950_p_codes_assemble_and_equal_the_spec",)),
    M("gfx950: value subtraction reversed", "zyfa/asm/gfx950/lean_p.py",
      'prog.emit("v_pk_fma_f32", span(d), operand(x[1]), k[-1.0], operand(x[0]))',
      'prog.emit("v_pk_fma_f32", span(d), operand(x[0]), k[-1.0], operand(x[1]))',
      ("tests/test_gfx950.py::test_generated_gfx950_p_codes_assemble_and_equal_the_spec",)),
    M("gfx950: causal limit off by one", "zyfa/asm/gfx950/setup.py",
      'emit("s_sub_u32", tmp, a.sk, a.sq)', 'emit("s_sub_u32", tmp, a.sk, a.sq)\n        emit("s_add_u32", tmp, tmp, 1)',
      ("tests/test_gfx950.py::test_generated_gfx950_causal_residues",)),
    M("gfx950: softmax_scale ignored", "zyfa/verify/gfx950/attention.py",
      "t = launch_args(q, k, v, q_descale, k_descale, v_descale, softmax_scale, q.device)",
      "t = launch_args(q, k, v, q_descale, k_descale, v_descale, None, q.device)",
      ("tests/test_gfx950.py::test_generated_gfx950_causal_residues",)),
    # ------------------------------------------------------------ quantizer
    M("quantizer: smooth_k averages over head_dim", "zyfa/quantize.py",
      "mean = torch.where(finite, kf, 0.0).sum(dim=1, keepdim=True) / finite.sum(dim=1, keepdim=True).clamp(min=1)",
      "mean = torch.where(finite, kf, 0.0).sum(dim=3, keepdim=True) / finite.sum(dim=3, keepdim=True).clamp(min=1)",
      ("tests/test_quantize.py::test_smooth_k_keeps_attention",)),
    M("quantizer: scale maps amax to 240", "zyfa/quantize.py", "descale = torch.clamp(amax, min=_TINY) / E4M3_MAX",
      "descale = torch.clamp(amax, min=_TINY) / 240.0", ("tests/test_quantize.py::test_amax_maps_to_e4m3_max",)),
    M("quantizer: q descale of the wrong head", "zyfa/quantize.py", "qd = qd[:, 0, ::group, 0].contiguous()",
      "qd = qd[:, 0, -Hkv:, 0].contiguous()", ("tests/test_quantize.py::test_amax_maps_to_e4m3_max",)),
    # ------------------------------------------------------------ validation
    M("validation: batch check removed", "zyfa/validation.py", "if Bk != B:", "if False:",
      ("tests/test_validation.py::test_batch_and_kv_shapes",)),
    M("validation: k/v shape check removed", "zyfa/validation.py", "if k.shape[:3] != v.shape[:3]:", "if False:",
      ("tests/test_validation.py::test_batch_and_kv_shapes",)),
    M("validation: descale device check removed", "zyfa/validation.py", "if d.device != q.device:", "if False:",
      ("tests/test_validation.py::test_descale_device_and_values",)),
    M("validation: NaN descale check removed", "zyfa/validation.py", "and not bool(torch.isfinite(d).all()):",
      "and False:", ("tests/test_validation.py::test_descale_device_and_values",)),
    M("validation: softmax_scale inf accepted", "zyfa/validation.py", "0 < softmax_scale < math.inf", "0 < softmax_scale",
      ("tests/test_validation.py::test_softmax_scale_must_be_positive_finite",)),
    M("validation: v stride check removed", "zyfa/validation.py", "if v.stride(-1) != 1 and v.stride(1) != 1:",
      "if False:", ("tests/test_validation.py::test_v_layout_and_types",)),
    M("descale shape check: 3-D shape not compared", "zyfa/spec/descales.py",
      "if tuple(d.shape) != tuple(fine_shape):", "if False:", ("tests/test_validation.py::test_descale_device_and_values",)),
    # ------------------------------------------------------------ integrations
    M("transformers: zyfa_fp8 always falls back to SDPA", "zyfa/integrations/transformers.py",
      "    reason = _fallback_reason(module, query, key, value, attention_mask, dropout, kwargs)\n    if reason:\n"
      "        return _sdpa(module, query, key, value, attention_mask, reason, dropout=dropout, scaling=scaling, **kwargs)\n"
      "    q, k, v, causal = _zyfa_layout(module, query, key, value, kwargs)\n    x = quantize_fp8",
      "    reason = 'forced'\n    if reason:\n"
      "        return _sdpa(module, query, key, value, attention_mask, reason, dropout=dropout, scaling=scaling, **kwargs)\n"
      "    q, k, v, causal = _zyfa_layout(module, query, key, value, kwargs)\n    x = quantize_fp8",
      ("tests/test_integrations.py::test_backends_run_zyfa",)),
    M("transformers: zyfa (bf16) always falls back to SDPA", "zyfa/integrations/transformers.py",
      "    if query.dtype not in HALF_DTYPES:", "    if True:", ("tests/test_integrations.py::test_backends_run_zyfa",)),
    M("transformers: explicit masks ignored", "zyfa/integrations/transformers.py", "    if attention_mask is not None:\n",
      "    if attention_mask is not None and False:\n",
      ("tests/test_integrations.py::test_padding_and_decode_fall_back_to_sdpa",)),
    M("transformers: fallback not logged", "zyfa/integrations/transformers.py",
      'log.warning("zyfa: falling back', 'log.debug("zyfa: falling back',
      ("tests/test_integrations.py::test_padding_and_decode_fall_back_to_sdpa",)),
    M("transformers: scaling not passed", "zyfa/integrations/transformers.py",
      "return zyfa.flash_attn_func(q, k, v, softmax_scale=scaling, causal=causal), None",
      "return zyfa.flash_attn_func(q, k, v, causal=causal), None", ("tests/test_integrations.py::test_backends_run_zyfa",)),
]


def _tree_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    return [f for f in out.splitlines() if (ROOT / f).is_file() and not f.startswith("bench/results/")]


def _copy_tree(dest: Path) -> None:
    for f in _tree_files():
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, dest / f)


def _pytest(tree: Path, selection, timeout: float) -> tuple[str, str]:
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *selection]
    try:
        r = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", ""
    tail = (r.stdout + r.stderr).strip().splitlines()
    failed = [ln.split(" - ")[0].removeprefix("FAILED ").removeprefix("ERROR ") for ln in tail
              if ln.startswith(("FAILED ", "ERROR "))]
    if r.returncode == 0:
        return "survived", tail[-1] if tail else ""
    if r.returncode == 1:
        return "killed", ", ".join(failed) or (tail[-1] if tail else "")
    return f"error (pytest rc {r.returncode})", tail[-1] if tail else ""


def run_one(m: Mutation, timeout: float) -> tuple[str, str, float]:
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="zyfa-mut-") as tmp:
        tree = Path(tmp)
        _copy_tree(tree)
        path = tree / m.file
        text = path.read_text()
        n = text.count(m.original)
        if n != 1:
            return f"error (original text found {n} times)", "", time.time() - t0
        path.write_text(text.replace(m.original, m.replacement))
        status, detail = _pytest(tree, m.selection, timeout)
    return status, detail, time.time() - t0


def write_report(rows, path: Path) -> None:
    killed = sum(r[1] == "killed" for r in rows)
    lines = ["# Mutation check", "",
             f"`python bench/mutation_check.py` ({time.strftime('%Y-%m-%d')}): {killed}/{len(rows)} killed. "
             "Each mutation applied alone to a copy of the tree; the selection must fail.", "",
             "| mutation | where | selection | result |", "|---|---|---|---|"]
    for m, status, detail, secs in rows:
        result = f"killed by `{detail}`" if status == "killed" else (
            "**SURVIVED**" if status == "survived" else f"**{status.upper()}** {detail}")
        sel = " ".join(m.selection).replace("|", "\\|")
        lines.append(f"| {m.name} | `{m.file}` | `{sel}` | {result} ({secs:.0f}s) |")
    path.write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-k", default="", help="only mutations whose name or file matches this regex")
    ap.add_argument("-j", type=int, default=2, help="mutations run at a time")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per selection")
    ap.add_argument("--baseline", action="store_true", help="run the selections on the unmutated tree")
    ap.add_argument("--report", default=str(REPORT))
    args = ap.parse_args(argv)
    muts = [m for m in MUTATIONS if re.search(args.k, m.name + " " + m.file)]
    if args.baseline:
        sels = sorted({s for m in muts for s in m.selection})
        with tempfile.TemporaryDirectory(prefix="zyfa-mut-") as tmp:
            _copy_tree(Path(tmp))
            status, detail = _pytest(Path(tmp), sels, args.timeout * 4)
        print("baseline:", status, detail)
        return 0 if status == "survived" else 1
    rows = []
    with concurrent.futures.ThreadPoolExecutor(args.j) as ex:
        futs = {ex.submit(run_one, m, args.timeout): m for m in muts}
        for f in concurrent.futures.as_completed(futs):
            m = futs[f]
            status, detail, secs = f.result()
            print(f"{status:>10}  {m.name}  ({secs:.0f}s) {detail}", flush=True)
            rows.append((m, status, detail, secs))
    rows.sort(key=lambda r: MUTATIONS.index(r[0]))
    write_report(rows, Path(args.report))
    print(f"{sum(r[1] == 'killed' for r in rows)}/{len(rows)} killed; report in {args.report}")
    return 0 if all(r[1] == "killed" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
