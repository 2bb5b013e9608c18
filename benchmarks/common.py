"""What every benchmark script shares: where the data is, the machine description, medians, writing results."""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import onnxruntime

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
import testdata  # noqa: E402  (tests/testdata.py: the manifest of the files benchmarks and tests read)

SHARED = testdata.prepared_root()  # ../shared's layout, holding the files of tests/data_manifest.json
FACES = SHARED / "faces"
RESULTS = REPO / "benchmarks" / "results"
ARTIFACTS = REPO / "artifacts"


# the instruction sets that change which ONNX Runtime / OpenCV kernels run (INT8 speed above all: VNNI)
CPU_FEATURES = {"avx2": "AVX2", "avx512f": "AVX-512", "avx512_vnni": "AVX-512 VNNI", "avx_vnni": "AVX-VNNI",
                "avx512_bf16": "AVX-512 BF16"}


def cpu_name() -> str:
    """The CPU's model name and the instruction sets of :data:`CPU_FEATURES` it has. Why the sets: machines of this
    project all call themselves "AMD EPYC", yet one generation has AVX2 alone and another AVX-512 with VNNI, and the
    same script's figures differ between them (INT8 convolutions above all)."""
    name, flags = platform.processor() or "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                name = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    except OSError:
        pass
    found = [label for flag, label in CPU_FEATURES.items() if flag in flags]
    return f"{name} ({', '.join(found) or 'no AVX2'})"


def machine() -> str:
    cpu = cpu_name()
    load = f", load average {os.getloadavg()[0]:.1f} at the start (a shared machine: wall times inflate with it)" \
        if hasattr(os, "getloadavg") else ""
    return (f"{os.cpu_count()} cores, {cpu}, Python {platform.python_version()}, "
            f"onnxruntime {onnxruntime.__version__}, {datetime.date.today().isoformat()}{load}")


def median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def write_section(name: str, markdown: str) -> Path:
    """Each script owns one section file; benchmarks/report.py assembles them into BENCHMARKS.md."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.md"
    path.write_text(markdown.rstrip() + "\n")
    return path


# Linux keeps a process's peak RSS across exec, so a child forked straight from this (large) process would report
# this process's peak. A small launcher process starts the measured one instead and reports its rusage.
LAUNCHER = (
    "import os, subprocess, sys, time; start = time.perf_counter(); "
    "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE); "
    "_, status, usage = os.wait4(p.pid, 0); "
    "print(time.perf_counter() - start, usage.ru_maxrss, os.waitstatus_to_exitcode(status), p.stderr.read().decode())"
)


def child_run(argv: list[str]) -> tuple[float, float]:
    """Wall time (s) from process start to exit and peak RSS (MB) of one fresh process."""
    report = subprocess.run([sys.executable, "-c", LAUNCHER, *argv], capture_output=True, text=True, check=True)
    wall, max_rss_kb, exit_code, stderr = report.stdout.split(" ", 3)
    if int(exit_code) != 0:
        raise RuntimeError(f"{argv} failed: {stderr}")
    return float(wall), int(max_rss_kb) / 1024


@contextlib.contextmanager
def replaced(module, name: str, value) -> Iterator[None]:
    """``module.name`` set to ``value`` for the block (a benchmark's variant of one constant or function)."""
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)
