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


def host_ms(fn, calls: int = 20) -> float:
    """The host's own time a call: ``calls`` calls queued behind a sleeping kernel, so that the
    GPU never waits for them (a call that synchronizes shows the sleep instead)."""
    torch.cuda._sleep(50_000_000)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    out = (time.perf_counter() - t0) / calls * 1e3
    torch.cuda.synchronize()
    return out


def graph_ms(fn, timer=median_ms) -> float:
    """``fn`` captured once as a CUDA graph and its replays timed: the device's time for the
    call's kernels without the host's work between them, as a serving engine replays its decode
    steps. (Eager timings of a call whose host work outlasts its kernels time the host.)"""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()                                   # warmed on a side stream, as capture asks
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return timer(graph.replay)


def kernel_ms(fn, calls: int = 1) -> dict[str, float]:
    """Device time a call per GPU activity (kernel or copy) name, by torch.profiler."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return {e.key: e.self_device_time_total / calls / 1e3 for e in prof.key_averages()
            if e.device_type == DeviceType.CUDA and e.self_device_time_total > 0}


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
