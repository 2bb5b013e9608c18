"""What every benchmark script shares: where the data is, the machine description, medians, writing results."""

from __future__ import annotations

import datetime
import os
import platform
import statistics
from pathlib import Path

import onnxruntime

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("FACEFUSE_SHARED", REPO.parent / "shared"))
FACES = SHARED / "faces"
RESULTS = REPO / "benchmarks" / "results"
ARTIFACTS = REPO / "artifacts"


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{os.cpu_count()} cores, {cpu}, Python {platform.python_version()}, "
            f"onnxruntime {onnxruntime.__version__}, {datetime.date.today().isoformat()}")


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
