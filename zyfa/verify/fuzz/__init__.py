"""Seeded random cases for every attention path, and the bounds each output is held to.

Shared by tests/verify/test_fuzz.py (CPU: the reference backend, Triton's interpreter, the gfx950
emulator) and bench/fuzz_gpu.py (GPU: Triton, the generated PTX kernel, ``backend="auto"``).
Verification code only: nothing on the production path imports it.

A case is drawn from ``random.Random(f"{path}:{profile}:{seed}")``, so a (path, profile, seed)
triple names it for good: ``run_case(draw_case("triton", 17, "cpu"))`` reproduces case 17.
Every case ends in one of:

  ok        ran, and the output is within its bound (below), finite, contiguous, of the right
            shape and dtype, and the LSE too;
  refused   a deliberate misuse (``Case.invalid``) or a combination the path does not take
            raised ValueError/TypeError (or, for an explicitly named backend that cannot run
            the call, the dispatcher's RuntimeError) whose message names the argument;
  fail      anything else: a wrong or missing error, NaN/Inf, a wrong shape/dtype/layout, or
            an output or LSE outside its bound (``silent`` marks a wrong result that raised
            nothing).

Bounds (``Bounds``): each is relative to a baseline computed in the same case, against float64
attention (``attention_fp64``) on the very values the path was given (for FP8: the dequantized
FP8 values, so the bound is on the kernel's error, not the quantizer's; a share of the FP8
cases are the INT8 Q.K^T mode, quantize_int8_qk's int8 q and k, held to the same bound):

  BF16/FP16  rel_err(out) <= K_HALF * rel_err(torch's own attention in that dtype) + floor;
             K_HALF = 3: torch (SDPA, float32 softmax) rounds only its output, a flash kernel
             also rounds P to the input dtype before P.V, which measures up to ~2x torch's
             error on these inputs; 3 leaves margin without hiding a real fault (a wrong mask
             or a dropped block gives errors of 1e-1 and more). Floor: a quarter of the dtype's
             unit roundoff (2^-10 bf16, 2^-13 fp16), for cases where torch's answer is exact or
             nearly so (one key, constant rows) and one rounding in the kernel is not.
  FP8        rel_err(out) <= K_FP8 * rel_err(fp8_attention_spec, same rules) + 2^-9;
             K_FP8 = 1.5: the spec runs the kernels' own algorithm with key blocks of 128; a
             kernel with other blocks (32 in the interpreter, 64 on gfx950) takes other block
             references, so its P codes round differently but alike in size. Floor 2^-9 + 2^-11: 2^-9 is the BF16
             output's rounding (half a unit in the last place, relative), which the float64
             spec does not have; 2^-11 the H200's FP8 tensor cores, which keep ~14 bits of
             their sums (a single-key case on the H200 went past 2^-9).
  LSE        max|lse - lse64| <= K_LSE * baseline + (1 + max|lse64|) * 2^-16 + LSE_ACC * smax,
             smax = max_ij sum_d |q_id k_jd| * softmax_scale (the scores' scale before
             cancellation). Baseline: float32 logsumexp of the float32 scores for BF16/FP16
             (K_LSE 2); the spec's own LSE error for FP8, K_LSE 6: the lean rules' rounding
             bias in the row sum depends on each block's reference, which moves with the
             kernel's block size and its accumulation, so the spec's value is one sample of
             it, not a ceiling (on the H200 kernels went well past 1x). The accumulation term
             is 2^-20 for BF16/FP16 (float32 sums) and, for FP8, 2^-13 per 32-wide step of the
             head dim (``lse_acc``): the H200's FP8 tensor cores keep ~13 fraction bits of each
             step's sum, and the truncations add up over the D/32 steps. Single-key cases
             (the spec exact, the score passed straight to the LSE) show it: on the H200
             they reached 2^-11.1 smax at d192 and 2^-11.6 at d256, past an
             earlier flat 2^-12, inside 6 * 2^-13 and 8 * 2^-13.
"""

from .cases import PATHS, Case, draw_case, expected_refusal, make_inputs  # noqa: F401
from .checks import compile_key, run_case, summarize  # noqa: F401
