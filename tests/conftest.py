"""Test setup: without a GPU the Triton kernels run in the interpreter, which must be
switched on before any kernel module is imported."""
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

HAS_GPU = torch.cuda.is_available()
# the generated Hopper kernels' GPU tests
H100_CLASS = HAS_GPU and torch.version.hip is None and torch.cuda.get_device_capability() == (9, 0)
hopper = pytest.mark.skipif(not H100_CLASS, reason="needs an sm_90 GPU (H100/H200)")
DEVICE = "cuda" if HAS_GPU else "cpu"


from zyfa.bench.measure import rel_err  # noqa: E402  (re-exported for the tests)


def describe_mismatch(out, ref, tol_abs=0.0) -> str:
    """How many elements differ, where the worst is, where NaN/Inf appear."""
    out, ref = out.double(), ref.double()
    diff = (out - ref).abs()
    bad = diff > tol_abs
    worst = torch.nonzero(diff == diff.nan_to_num(0).max())[:1].tolist()
    nonfinite = torch.nonzero(~torch.isfinite(out))[:5].tolist()
    return (f"{int(bad.sum())}/{out.numel()} elements differ by > {tol_abs:g}; worst {diff.nan_to_num(0).max():.3e} "
            f"at {worst}; non-finite at {nonfinite}")


def rounding_error(ref, dtype) -> float:
    """The error of rounding the float64 reference to the output dtype: the part of a kernel's
    distance from float64 that no kernel avoids."""
    return 1.05 * rel_err(ref.to(dtype), ref) + 1e-6


def assert_rel(out, ref, bound, what=""):
    err = rel_err(out, ref)
    assert err <= bound, f"{what}: rel err {err:.3e} > bound {bound:.3e}; " + describe_mismatch(out, ref)


gpu = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
