"""ptxas and the SASS tools from Triton's wheel: PTX -> cubin, with the resource report."""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import tempfile


def tool(name: str) -> str:
    import triton
    path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{name} not found at {path}; zyfa uses the one in Triton's wheel")
    return path


@dataclasses.dataclass(frozen=True)
class Assembled:
    cubin: bytes
    registers: int
    spill_bytes: int          # spill stores + loads
    report: str

    def sass(self) -> str:
        return sass(self.cubin)


def sass(cubin: bytes) -> str:
    """Machine code of a cubin, disassembled with cuobjdump."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        return subprocess.run([tool("cuobjdump"), "-sass", path], capture_output=True, text=True,
                              check=True).stdout


def assemble(ptx: str, arch: str = "sm_90a", ptxas: str | None = None) -> Assembled:
    """Assemble with ``ptxas -O3 -v`` (the one in Triton's wheel, or ``ptxas``); raises
    RuntimeError with ptxas's message on failure."""
    with tempfile.TemporaryDirectory() as d:
        src, out = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        r = subprocess.run([ptxas or tool("ptxas"), f"-arch={arch}", "-O3", "-v", src, "-o", out],
                           capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"ptxas failed:\n{r.stderr}")
        with open(out, "rb") as f:
            cubin = f.read()
    report = r.stderr + r.stdout
    regs = re.search(r"Used (\d+) registers", report)
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
    return Assembled(cubin, int(regs.group(1)) if regs else 0, sum(int(a) + int(b) for a, b in spills), report)
