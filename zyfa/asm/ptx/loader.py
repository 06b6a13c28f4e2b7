"""Load cubins and launch their kernels on PyTorch's current stream, through the CUDA
driver API of cuda-python (``pip install 'zyfa[cuda]'``)."""
from __future__ import annotations

import ctypes

import torch


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError as e:
        raise ImportError("zyfa's generated kernels need cuda-python (pip install 'zyfa[cuda]')") from e
    return driver


def _check(result, what: str):
    drv = _driver()
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != drv.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{what} failed: {err}")
    return rest[0] if len(rest) == 1 else rest


class Kernel:
    """One function of a loaded cubin, bound to the device of its first use."""

    def __init__(self, cubin: bytes, name: str, device: torch.device):
        drv = _driver()
        torch.cuda.init()
        idx = device.index if device.index is not None else torch.cuda.current_device()
        with torch.cuda.device(idx):
            torch.cuda.current_stream().synchronize()        # makes the primary context current
            _check(drv.cuInit(0), "cuInit")
            ctx = _check(drv.cuDevicePrimaryCtxRetain(_check(drv.cuDeviceGet(idx), "cuDeviceGet")),
                         "cuDevicePrimaryCtxRetain")
            _check(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
            self._module = _check(drv.cuModuleLoadData(cubin), "cuModuleLoadData")
            self._fn = _check(drv.cuModuleGetFunction(self._module, name.encode()), f"cuModuleGetFunction({name})")
        self.name, self.device = name, idx

    def __call__(self, grid: tuple, block: tuple, args: list, shared_bytes: int = 0) -> None:
        """args in the kernel's parameter order: ctypes values (c_uint64 for pointers), or
        cuda-python structures such as a CUtensorMap (passed by value, 128 bytes)."""
        drv = _driver()
        ptrs = (ctypes.c_void_p * len(args))(*[a.getPtr() if hasattr(a, "getPtr") else ctypes.addressof(a)
                                                for a in args])
        stream = torch.cuda.current_stream(self.device).cuda_stream
        g = tuple(grid) + (1,) * (3 - len(grid))
        b = tuple(block) + (1,) * (3 - len(block))
        _check(drv.cuLaunchKernel(self._fn, *g, *b, shared_bytes, drv.CUstream(stream),
                                  ctypes.addressof(ptrs), 0), f"launching {self.name}")


def tensor_map_2d(t: torch.Tensor, box_rows: int, swizzle_128b: bool = True):
    """A TMA descriptor over a 2-D byte-element tensor (rows, cols), boxes of (box_rows, cols)."""
    drv = _driver()
    if t.dim() != 2 or t.element_size() != 1 or t.stride(1) != 1:
        raise ValueError(f"need a 2-D tensor of 1-byte elements with contiguous rows, got {t.dtype} {tuple(t.shape)}")
    rows, cols = t.shape
    swizzle = drv.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B if swizzle_128b else \
        drv.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE
    return _check(drv.cuTensorMapEncodeTiled(
        drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, t.data_ptr(),
        [drv.cuuint64_t(cols), drv.cuuint64_t(rows)], [drv.cuuint64_t(t.stride(0))],
        [drv.cuuint32_t(cols), drv.cuuint32_t(box_rows)], [drv.cuuint32_t(1), drv.cuuint32_t(1)],
        drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
        drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE), "cuTensorMapEncodeTiled")
