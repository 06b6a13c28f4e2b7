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
        """args: ctypes values in the kernel's parameter order (c_uint64 for pointers)."""
        drv = _driver()
        ptrs = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
        stream = torch.cuda.current_stream(self.device).cuda_stream
        g = tuple(grid) + (1,) * (3 - len(grid))
        b = tuple(block) + (1,) * (3 - len(block))
        _check(drv.cuLaunchKernel(self._fn, *g, *b, shared_bytes, drv.CUstream(stream),
                                  ctypes.addressof(ptrs), 0), f"launching {self.name}")
