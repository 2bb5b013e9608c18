"""`facefuse gpu`: readings when NVML is present, a clear message when not, the power-limit wrapper, gauges."""

from __future__ import annotations

import json

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from facefuse.cli import main
from facefuse.errors import ErrorCode, FacefuseError
from facefuse.gpu import GpuCollector, GpuReading, gpu_metric_families, nvml_status, read_gpus, set_power_limit


def test_readings_match_nvml_availability(capsys):
    readings = read_gpus()
    status = nvml_status()
    assert main(["gpu", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["status"] == status and len(shown["gpus"]) == len(readings)
    if status != "ok":
        assert readings == []
        assert main(["gpu"]) == 0
        assert capsys.readouterr().out.strip() == status  # says why: the package or the driver is missing


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
