"""Load cubins and launch their kernels on PyTorch's current stream, through the CUDA
driver API of cuda-python (``pip install 'zyfa[cuda]'``)."""
from __future__ import annotations

import ctypes
import functools

import torch

from ...device import device_index


@functools.cache                  # asked at every launch and descriptor
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

    def __init__(self, cubin: bytes, name: str, device: torch.device, shared_bytes: int = 0):
        drv = _driver()
        torch.cuda.init()
        idx = device_index(device)
        with torch.cuda.device(idx):
            # makes the primary context current; not while the stream is captured into a CUDA
            # graph (not permitted there: a kernel first needed inside a capture, such as the
            # dense kernel of a short call that ran on the packed kernel eagerly)
            if not torch.cuda.is_current_stream_capturing():
                torch.cuda.current_stream().synchronize()
            _check(drv.cuInit(0), "cuInit")
            ctx = _check(drv.cuDevicePrimaryCtxRetain(_check(drv.cuDeviceGet(idx), "cuDeviceGet")),
                         "cuDevicePrimaryCtxRetain")
            _check(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
            self._module = _check(drv.cuModuleLoadData(cubin), "cuModuleLoadData")
            self._fn = _check(drv.cuModuleGetFunction(self._module, name.encode()), f"cuModuleGetFunction({name})")
            if shared_bytes > 48 * 1024:          # dynamic shared memory past 48 KB must be opted into
                _check(drv.cuFuncSetAttribute(
                    self._fn, drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    shared_bytes), "cuFuncSetAttribute")
        self.name, self.device, self.shared_bytes = name, idx, shared_bytes

    def __call__(self, grid: tuple, block: tuple, args: list) -> None:
        """args in the kernel's parameter order: ctypes values (c_uint64 for pointers), or
        cuda-python structures such as a CUtensorMap (passed by value, 128 bytes)."""
        drv = _driver()
        ptrs = (ctypes.c_void_p * len(args))(*[a.getPtr() if hasattr(a, "getPtr") else ctypes.addressof(a)
                                                for a in args])
        stream = torch.cuda.current_stream(self.device).cuda_stream
        g = tuple(grid) + (1,) * (3 - len(grid))
        b = tuple(block) + (1,) * (3 - len(block))
        _check(drv.cuLaunchKernel(self._fn, *g, *b, self.shared_bytes, drv.CUstream(stream),
                                  ctypes.addressof(ptrs), 0), f"launching {self.name}")


def tensor_map(t: torch.Tensor, box: tuple, swizzle: int = 128):
    """A TMA descriptor over a tensor of 1-byte elements (up to 5 dims, innermost contiguous,
    other strides multiples of 16 bytes), loading boxes of shape ``box`` (same order as
    t.shape). Reads past the tensor's bounds fill with zeros. A descriptor holds only the
    address, shape, strides, box and swizzle, so it is encoded once for them (a model's
    layers and a benchmark's calls reuse the same buffers)."""
    return _encoded_map(t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.element_size(), tuple(box), swizzle)


@functools.lru_cache(maxsize=256)
def _encoded_map(ptr: int, shape: tuple, strides: tuple, element_size: int, box: tuple, swizzle: int):
    drv = _driver()
    dim = len(shape)
    if element_size != 1 or strides[-1] != 1 or len(box) != dim or not 1 <= dim <= 5:
        raise ValueError(f"need a 1-5 dim tensor of 1-byte elements, innermost contiguous, and a box of as "
                         f"many dims; got {element_size}-byte elements {shape} strides {strides} box {box}")
    if ptr % 16 or any(st % 16 for st in strides[:-1]):
        raise ValueError(f"TMA needs a 16-byte aligned base and strides, got strides {strides}")
    modes = {128: "CU_TENSOR_MAP_SWIZZLE_128B", 64: "CU_TENSOR_MAP_SWIZZLE_64B", 0: "CU_TENSOR_MAP_SWIZZLE_NONE"}
    mode = getattr(drv.CUtensorMapSwizzle, modes[swizzle])
    u64, u32 = drv.cuuint64_t, drv.cuuint32_t
    return _check(drv.cuTensorMapEncodeTiled(
        drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8, dim, ptr,
        [u64(n) for n in reversed(shape)], [u64(st) for st in reversed(strides[:-1])],
        [u32(n) for n in reversed(box)], [u32(1)] * dim,
        drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, mode,
        drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE), "cuTensorMapEncodeTiled")
