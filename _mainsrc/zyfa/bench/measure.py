"""Timing, energy and error of one call."""
from __future__ import annotations

import time

import torch


def rel_err(out, ref) -> float:
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm()).item()


def median_ms(fn) -> float:
    """Median over many runs after warm-up; triton's do_bench clears L2 before each run."""
    import triton
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


class Power:
    """NVML's energy counter and SM clock for the current GPU (None fields when NVML is absent)."""

    def __init__(self):
        self.reason = None
        try:
            import pynvml
            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
            pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
        except Exception as e:  # noqa: BLE001
            self.nvml, self.reason = None, f"NVML unavailable (pip install nvidia-ml-py): {type(e).__name__}: {e}"

    def driver(self) -> str | None:
        return self.nvml.nvmlSystemGetDriverVersion() if self.nvml else None

    def measure(self, fn, ms_per_call: float, seconds: float = 0.5) -> tuple[float | None, float | None]:
        """(joules per call, mean SM clock in MHz) over about ``seconds`` of back-to-back calls."""
        if self.nvml is None:
            return None, None
        n = max(3, int(seconds * 1e3 / max(ms_per_call, 1e-3)))
        fn()
        torch.cuda.synchronize()
        clocks = []
        e0 = self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
        t0 = time.perf_counter()
        for i in range(n):
            fn()
            if i % max(1, n // 8) == 0:
                clocks.append(self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_SM))
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        e1 = self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
        joules = (e1 - e0) / 1e3 / n
        if wall < 0.1 or joules <= 0:          # the counter updates every few ms; too short to trust
            return None, sum(clocks) / len(clocks)
        return joules, sum(clocks) / len(clocks)
