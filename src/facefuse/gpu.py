"""NVIDIA GPU readings through NVML, the power-limit wrapper, and the Prometheus gauges the service exports.

NVML is optional (``pip install 'facefuse[gpu]'`` installs ``nvidia-ml-py``); without it, or without an NVIDIA
driver, every reading is simply empty so the same command and service run on any machine. Capping the board's
power (``nvidia-smi -pl``) trades a few percent of speed for a cooler, quieter card on long batch runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterator

from .errors import ErrorCode, FacefuseError


@dataclass(frozen=True)
class GpuReading:
    index: int
    name: str
    memory_used_mb: float
    memory_total_mb: float
    utilisation_pct: float
    temperature_c: float
    power_w: float | None
    power_limit_w: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def nvml_status() -> str:
    """"ok", or why no reading can be taken (module missing, no driver)."""
    try:
        import pynvml
    except ImportError:
        return "nvidia-ml-py is not installed (pip install 'facefuse[gpu]')"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return f"no NVIDIA GPU/NVML found ({exc})"
    pynvml.nvmlShutdown()
    return "ok"


def read_gpus() -> list[GpuReading]:
    """One reading per NVIDIA GPU; empty when NVML or the driver is absent."""
    if nvml_status() != "ok":
        return []
    import pynvml

    pynvml.nvmlInit()
    try:
        return [_reading(pynvml, i) for i in range(pynvml.nvmlDeviceGetCount())]
    finally:
        pynvml.nvmlShutdown()


def _reading(pynvml: Any, index: int) -> GpuReading:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
    name = pynvml.nvmlDeviceGetName(handle)

    def optional_watts(read: Callable[[Any], int]) -> float | None:
        try:  # laptops and some boards do not report power
            return read(handle) / 1000.0
        except pynvml.NVMLError:
            return None

    return GpuReading(
        index=index,
        name=name.decode() if isinstance(name, bytes) else str(name),
        memory_used_mb=memory.used / 2**20,
        memory_total_mb=memory.total / 2**20,
        utilisation_pct=float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu),
        temperature_c=float(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)),
        power_w=optional_watts(pynvml.nvmlDeviceGetPowerUsage),
        power_limit_w=optional_watts(pynvml.nvmlDeviceGetEnforcedPowerLimit),
    )


def power_limit_command(watts: float, index: int = 0) -> list[str]:
    if watts <= 0:
        raise FacefuseError(ErrorCode.INVALID_OPTION, f"power limit must be positive, got {watts} W",
                            "pass the limit in watts, within the range `nvidia-smi -q -d POWER` reports",
                            {"watts": watts})
    return ["nvidia-smi", "-i", str(index), "-pl", f"{watts:g}"]


def set_power_limit(watts: float, index: int = 0, *, dry_run: bool = False,
                    is_root: Callable[[], bool] = lambda: os.geteuid() == 0,
                    which: Callable[[str], str | None] = shutil.which) -> list[str]:
    """Run ``nvidia-smi -pl`` (root only) and return the command; with ``dry_run`` only return it."""
    command = power_limit_command(watts, index)
    if dry_run:
        return command
    if not is_root():
        raise FacefuseError(ErrorCode.INVALID_OPTION, "setting the GPU power limit needs root",
                            "run the command with sudo, or add --dry-run to see the command", {"command": command})
    if which("nvidia-smi") is None:
        raise FacefuseError(ErrorCode.BAD_REQUEST, "nvidia-smi was not found",
                            "install the NVIDIA driver utilities", {"command": command})
    result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise FacefuseError(ErrorCode.BAD_REQUEST, f"nvidia-smi refused the limit: {result.stdout.strip()}",
                            "the limit must lie within the board's min/max power limit", {"command": command})
    return command


def gpu_metric_families(readings: list[GpuReading]) -> Iterator[Any]:
    """Prometheus gauge families for the readings (one sample per GPU, labelled by index and name)."""
    from prometheus_client.core import GaugeMetricFamily

    fields = [("memory_used_bytes", "GPU memory in use", lambda r: r.memory_used_mb * 2**20),
              ("memory_total_bytes", "GPU memory on the board", lambda r: r.memory_total_mb * 2**20),
              ("utilisation_ratio", "GPU busy fraction", lambda r: r.utilisation_pct / 100.0),
              ("temperature_celsius", "GPU temperature", lambda r: r.temperature_c),
              ("power_watts", "GPU power draw", lambda r: r.power_w),
              ("power_limit_watts", "GPU enforced power limit", lambda r: r.power_limit_w)]
    for suffix, doc, value in fields:
        family = GaugeMetricFamily(f"facefuse_gpu_{suffix}", doc, labels=["gpu", "name"])
        for reading in readings:
            sample = value(reading)
            if sample is not None:
                family.add_metric([str(reading.index), reading.name], float(sample))
        yield family


class GpuCollector:
    """A Prometheus collector that reads NVML at each scrape; register it only when :func:`nvml_status` is "ok"."""

    def collect(self) -> Iterator[Any]:
        yield from gpu_metric_families(read_gpus())
