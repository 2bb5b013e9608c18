"""`facefuse gpu`: readings when NVML is present, a clear message when not, the power-limit wrapper, gauges."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from facefuse.cli import main
from facefuse.errors import ErrorCode, FacefuseError
from facefuse.gpu import GpuCollector, GpuReading, gpu_metric_families, read_gpus, set_power_limit


def test_readings_match_nvml_availability(capsys):
    """What `facefuse gpu` says is decided here from the machine itself (is the NVML package installed, is there an
    NVIDIA device node), not read back from the function under test."""
    package = importlib.util.find_spec("pynvml") is not None
    device = any(Path("/dev").glob("nvidia[0-9]*"))
    assert main(["gpu", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    if not package:
        assert shown["status"].startswith("nvidia-ml-py is not installed") and "facefuse[gpu]" in shown["status"]
    elif not device:
        assert shown["status"].startswith("no NVIDIA GPU/NVML found")
    else:
        assert shown["status"] == "ok" and shown["gpus"]
        assert all(g["memory_total_mb"] > 0 and g["name"] for g in shown["gpus"])
    if shown["status"] != "ok":
        assert shown["gpus"] == [] and read_gpus() == []
        assert main(["gpu"]) == 0
        assert capsys.readouterr().out.strip() == shown["status"]  # the plain text says the same reason


def test_power_limit_dry_run_and_checks(capsys):
    assert main(["gpu", "--power-limit", "120", "--index", "1", "--dry-run"]) == 0
    assert capsys.readouterr().out.strip() == "would run: nvidia-smi -i 1 -pl 120"
    with pytest.raises(FacefuseError) as caught:
        set_power_limit(120, is_root=lambda: False)
    assert caught.value.code is ErrorCode.INVALID_OPTION and "sudo" in caught.value.hint
    with pytest.raises(FacefuseError) as caught:
        set_power_limit(120, is_root=lambda: True, which=lambda name: None)
    assert "nvidia-smi" in caught.value.message
    assert main(["gpu", "--power-limit", "-5", "--dry-run", "--json"]) == 2


def test_gauges_carry_each_reading():
    readings = [GpuReading(0, "RTX 3060", 1024.0, 6144.0, 37.0, 61.0, 95.5, 170.0),
                GpuReading(1, "GTX 1660", 512.0, 6144.0, 0.0, 40.0, None, None)]
    families = {f.name: f for f in gpu_metric_families(readings)}
    memory = families["facefuse_gpu_memory_used_bytes"].samples
    assert [(s.labels["gpu"], s.value) for s in memory] == [("0", 1024.0 * 2**20), ("1", 512.0 * 2**20)]
    assert [s.value for s in families["facefuse_gpu_utilisation_ratio"].samples] == [0.37, 0.0]
    assert len(families["facefuse_gpu_power_watts"].samples) == 1  # a board that does not report power is left out


def test_collector_registers_and_scrapes():
    registry = CollectorRegistry()
    registry.register(GpuCollector())
    text = generate_latest(registry).decode()
    assert "facefuse_gpu_memory_used_bytes" in text
    assert ('gpu="0"' in text) == bool(read_gpus())
