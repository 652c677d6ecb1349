"""Where a decode step's time goes: `torch.profiler` over a few decoded tokens, summarised per token.

A 135M-parameter model decoding slowly on an H200 (docs/PERFORMANCE.md) is host overhead,
not arithmetic. This says which kind: kernel launches per token (CUDA graphs' target), host syncs per token
(``.item()``, device-to-host copies: each one drains the GPU queue), the host time per token against the
device's busy time per token, and the operators that dominate each. It runs wherever torch runs (on a CPU the
device columns are empty), so the GPU window's bench carries it and the CPU tests rehearse it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# host-side events that wait for the device (or copy from it): each one empties the launch queue
SYNC_EVENTS = ("aten::_local_scalar_dense", "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
               "cudaMemcpy", "cudaMemcpyAsync")
LAUNCH_EVENTS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch")


def _device_us(e: Any) -> float:
    """An event's self time on the device, µs (the attribute is named after CUDA in older torch)."""
    for name in ("self_device_time_total", "self_cuda_time_total"):
        v = getattr(e, name, None)
        if v is not None:
            return float(v)
    return 0.0


def profile_calls(fn: Callable[[], Any], units: int, *, device_type: str = "cpu", top: int = 8) -> dict[str, Any]:
    """Run ``fn`` once under the profiler; ``units``: what it produced (tokens), for the per-unit columns.
    Returns wall ms per unit, host ops / launches / syncs per unit, the device's busy ms per unit, and the
    ``top`` operators by host self time and by device self time."""
    import time

    import torch
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device_type == "cuda" else [])
    sync = torch.cuda.synchronize if device_type == "cuda" else (lambda: None)
    sync()
    with profile(activities=acts) as prof:
        t = time.perf_counter()
        fn()
        sync()
        wall = time.perf_counter() - t
    events = prof.key_averages()
    n = max(1, units)

    def count(names: tuple[str, ...]) -> int:
        return sum(e.count for e in events if e.key in names)

    host_ops = sum(e.count for e in events if e.key.startswith("aten::"))
    device_us = sum(_device_us(e) for e in events)
    by_host = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    by_device = [e for e in sorted(events, key=_device_us, reverse=True)[:top] if _device_us(e) > 0]
    return {
        "units": units, "wall_ms_per_unit": round(wall * 1e3 / n, 3),
        "aten_ops_per_unit": round(host_ops / n, 1), "launches_per_unit": round(count(LAUNCH_EVENTS) / n, 1),
        "syncs_per_unit": round(count(SYNC_EVENTS) / n, 2), "device_busy_ms_per_unit": round(device_us / 1e3 / n, 3),
        "top_host": [{"op": e.key, "calls": e.count, "self_ms": round(e.self_cpu_time_total / 1e3, 3)} for e in by_host],
        "top_device": [{"op": e.key[:80], "calls": e.count, "self_ms": round(_device_us(e) / 1e3, 3)}
                       for e in by_device],
    }
