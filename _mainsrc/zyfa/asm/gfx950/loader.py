"""Running gfx950 code objects: kernel arguments packed from the code object's own metadata
(shared by the emulator and the HIP runtime), and a ctypes loader on the HIP runtime
(``libamdhip64``) that launches on PyTorch's current stream.

The loader is written and unit-tested up to the point where a device is needed (tests fake
the runtime library): **it has not run on an MI355X**.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import re
import struct


@dataclasses.dataclass(frozen=True)
class Arg:
    offset: int
    size: int
    kind: str               # "global_buffer" (a pointer) or "by_value"


def kernel_args(text: str, name: str) -> tuple[list[Arg], int]:
    """The (offset, size, kind) of each argument of kernel ``name`` and the kernarg segment
    size, from the ``.amdgpu_metadata`` block of its assembly text (keys in any order, as
    LLVM and zyfa's target write them)."""
    meta = text.split(".amdgpu_metadata", 1)[-1].split(".end_amdgpu_metadata", 1)[0]
    kernels = re.split(r"\n  - ", meta)
    for k in kernels:
        if re.search(rf"^\s*\.?name:\s+{re.escape(name)}\s*$", k, re.M):
            args = []
            for a in re.split(r"\n      - ", k)[1:]:
                off = re.search(r"\.offset:\s+(\d+)", a)
                size = re.search(r"\.size:\s+(\d+)", a)
                kind = re.search(r"\.value_kind:\s+(\w+)", a)
                if off and size and kind:
                    args.append(Arg(int(off.group(1)), int(size.group(1)), kind.group(1)))
            seg = re.search(r"\.kernarg_segment_size:\s+(\d+)", k)
            return sorted(args, key=lambda a: a.offset), int(seg.group(1))
    raise ValueError(f"no metadata for kernel {name!r}")


def pack(args: list[Arg], segment: int, values: list) -> bytes:
    """The kernarg segment: each value at its argument's offset (pointers and integers as
    little-endian unsigned of the argument's size, floats as float32/float64)."""
    if len(values) != len(args):
        raise ValueError(f"the kernel takes {len(args)} arguments, got {len(values)}")
    buf = bytearray(segment)
    for a, v in zip(args, values):
        if isinstance(v, float):
            raw = struct.pack("<f" if a.size == 4 else "<d", v)
        else:
            raw = int(v).to_bytes(a.size, "little", signed=int(v) < 0)
        buf[a.offset:a.offset + a.size] = raw
    return bytes(buf)


class HipError(RuntimeError):
    pass


def hip_runtime(path: str | None = None):
    """The HIP runtime library (ctypes), or ImportError saying what is missing."""
    name = path or ctypes.util.find_library("amdhip64") or "libamdhip64.so"
    try:
        return ctypes.CDLL(name)
    except OSError as e:
        raise ImportError(f"the HIP runtime ({name}) is not available: generated gfx950 kernels need ROCm "
                          f"and an AMD GPU") from e


HIP_LAUNCH_PARAM_BUFFER_POINTER = 0x01
HIP_LAUNCH_PARAM_BUFFER_SIZE = 0x02
HIP_LAUNCH_PARAM_END = 0x03


class HipKernel:
    """One kernel of an hsaco, loaded through hipModuleLoadData and launched with its
    kernarg segment passed as a buffer (HIP_LAUNCH_PARAM_BUFFER_POINTER)."""

    def __init__(self, hsaco: bytes, name: str, args: list[Arg], segment: int, lib=None):
        self.lib = lib if lib is not None else hip_runtime()
        self.name, self.args, self.segment = name, args, segment
        self._image = ctypes.create_string_buffer(hsaco, len(hsaco))
        self.module, self.function = ctypes.c_void_p(), ctypes.c_void_p()
        self._check(self.lib.hipModuleLoadData(ctypes.byref(self.module), self._image), "hipModuleLoadData")
        self._check(self.lib.hipModuleGetFunction(ctypes.byref(self.function), self.module, name.encode()),
                    "hipModuleGetFunction")

    def _check(self, status, what):
        if status != 0:
            raise HipError(f"{what} failed with hipError {status}")

    def __call__(self, grid: tuple, block: tuple, values: list, stream: int = 0, shared_bytes: int = 0) -> None:
        kernargs = pack(self.args, self.segment, values)
        buf = ctypes.create_string_buffer(kernargs, len(kernargs))
        size = ctypes.c_size_t(len(kernargs))
        config = (ctypes.c_void_p * 5)(HIP_LAUNCH_PARAM_BUFFER_POINTER, ctypes.cast(buf, ctypes.c_void_p),
                                       HIP_LAUNCH_PARAM_BUFFER_SIZE, ctypes.cast(ctypes.byref(size), ctypes.c_void_p),
                                       HIP_LAUNCH_PARAM_END)
        g = tuple(grid) + (1,) * (3 - len(grid))
        b = tuple(block) + (1,) * (3 - len(block))
        self._check(self.lib.hipModuleLaunchKernel(self.function, *g, *b, shared_bytes, ctypes.c_void_p(stream),
                                                   None, config), "hipModuleLaunchKernel")
