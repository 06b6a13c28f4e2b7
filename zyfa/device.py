"""Facts about the machine a call runs on, asked in one place: the GPU's architecture, whether
Triton's interpreter is on, whether the E4M3 conversion instruction exists, and which driver
bindings are installed. Looked up once where a lookup could run inside torch.compile's trace."""
from __future__ import annotations

import ctypes.util
import functools
import importlib.util
import os

import torch


def device_index(device: torch.device) -> int:
    """A CUDA device's index ("cuda" alone: the current device)."""
    return device.index if device.index is not None else torch.cuda.current_device()


@functools.cache                  # asked at every packed launch
def sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def device_arch(device: torch.device) -> str:
    """"sm90"-style for NVIDIA, the gfx name for AMD, "cpu" otherwise."""
    if device.type != "cuda":
        return "cpu"
    return _cuda_arch(device_index(device))


@functools.cache                  # asked at every call (a few us each on the H200's host)
def _cuda_arch(index: int) -> str:
    if torch.version.hip:
        return torch.cuda.get_device_properties(index).gcnArchName.split(":")[0]
    major, minor = torch.cuda.get_device_capability(index)
    return f"sm{major}{minor}"


def to_device(values, device: torch.device, dtype: torch.dtype = torch.int32) -> torch.Tensor:
    """Host integers (a list or a CPU tensor) as a tensor on ``device`` without synchronizing:
    on a GPU staged in pinned memory and copied asynchronously. (torch.tensor(..., device=cuda)
    and .to(cuda) from pageable memory wait for every queued kernel, which exposed the host's
    whole share of a varlen call.) A tensor already on ``device`` is returned."""
    if isinstance(values, torch.Tensor) and values.device == device:
        return values if values.dtype == dtype else values.to(dtype)
    host = torch.as_tensor(values, dtype=dtype, device="cpu")
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def host_table(values, device: torch.device) -> torch.Tensor:
    """Host int32 values (a list, or a list of equal-length lists) on ``device`` as to_device
    puts them there, but copied once: a model's layers send one batch's tables (lengths, first
    keys, page rows) call after call, so a copy is kept (one a stream) and every call sending
    the same values shares it. Only for tables the kernels read and nothing writes. While a CUDA
    graph is captured, to_device's own copy."""
    if device.type != "cuda" or torch.cuda.is_current_stream_capturing():
        return to_device(values, device)
    key = tuple(tuple(v) if isinstance(v, (list, tuple)) else v for v in values)
    return _table_on_device(key, device, torch.cuda.current_stream(device).cuda_stream)


@functools.lru_cache(maxsize=64)     # a model's layers call with the same batch
def _table_on_device(values: tuple, device: torch.device, stream: int) -> torch.Tensor:
    """Allocated on ``stream`` (the current one): an evicted copy's memory is reused only after
    that stream's launches."""
    return to_device(values, device)


def nvidia_capability(arch: str) -> tuple[int, int]:
    """(major, minor) from an NVIDIA arch string such as "sm90"."""
    digits = arch[2:]
    return int(digits[:-1]), int(digits[-1])


def is_rocm() -> bool:
    return torch.version.hip is not None


def interpreter_active() -> bool:
    """Whether Triton's interpreter runs kernels on the CPU (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def hardware_rounding(device: torch.device) -> bool:
    """Whether the exact rule can round P by cvt.rn.satfinite.e4m3x2.f32 (NVIDIA sm_89+, not
    under Triton's interpreter, whose casts round differently). It gives the integer
    rounding's codes bit for bit (measured on the H200) in one instruction
    for two values instead of ~8 for each."""
    if device.type != "cuda" or is_rocm() or interpreter_active():
        return False
    return _has_e4m3_conversion(device_index(device))


@functools.cache
def _has_e4m3_conversion(index: int) -> bool:
    return torch.cuda.get_device_capability(index) >= (8, 9)     # asked once a device, not a call


def _has_cuda_python() -> bool:
    try:
        return importlib.util.find_spec("cuda") is not None and importlib.util.find_spec("cuda.bindings") is not None
    except ImportError:
        return False


HAS_CUDA_PYTHON = _has_cuda_python()                                  # the generated PTX kernel's loader
HAS_HIP_RUNTIME = ctypes.util.find_library("amdhip64") is not None    # the generated gfx950 kernel's loader
