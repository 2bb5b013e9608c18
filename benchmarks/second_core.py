"""What the second core gives the photo path after the two analyses: the segmenter's target half begun beside the
render (``Segment.begins``) and the render's masks and target triangles drawn beside its geometry
(``mesh_engine``'s ``on_a_thread`` calls), against the same work run inline on the calling thread.

One process, one warm ``Fuser``, fusions alternating run by run between "aside" (as shipped) and "inline" (the same
code with ``on_a_thread`` in ``facefuse.stages.base`` and ``facefuse.fusion.mesh_engine`` replaced by a call that
does the work at once), so both variants see the same neighbours from one fusion to the next — steadier than two
processes on a shared machine. The photo's two analyses run on two threads in both. Writes
benchmarks/results/second_core.md."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from common import FACES, machine, median, write_section

from facefuse.allocator import keep_freed_memory
from facefuse.fusion import mesh_engine
from facefuse.fusion.engine import FusionOptions
from facefuse.pipeline import Fuser, FuserConfig
from facefuse.stages import base

SOURCE = FACES / "face_recognition/biden.jpg"
TARGET = FACES / "face_recognition/obama-720p.jpg"  # fusion_speed.py's 720p pair
MODULES = (base, mesh_engine)  # where the photo path's per-face work goes aside


def inline(work: Callable[[], Any], name: str) -> Future[Any]:
    """``on_a_thread``'s contract with the work done here and now."""
    future: Future[Any] = Future()
    try:
        future.set_result(work())
    except BaseException as exc:
        future.set_exception(exc)
    return future


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=60, help="fusions per variant")
    args = parser.parse_args()
    keep_freed_memory()  # as the CLI and the server do for their process
    fuser, options = Fuser(FuserConfig(analysis_cache_mb=0)), FusionOptions()
    source, target = SOURCE.read_bytes(), TARGET.read_bytes()
    aside = {module: module.on_a_thread for module in MODULES}
    variants = {"aside (as shipped)": aside, "segmenter aside, render inline": {base: aside[base], mesh_engine: inline},
                "inline": {module: inline for module in MODULES}}
    samples: dict[str, dict[str, list[float]]] = {name: {"wall": [], "cpu": []} for name in variants}
    load_before = os.getloadavg()
    for run in range(args.runs + 3):
        order = list(variants)[run % len(variants):] + list(variants)[:run % len(variants)]  # each first in turn
        for name in order:
            for module, call in variants[name].items():
                module.on_a_thread = call  # type: ignore[attr-defined]
            start, start_cpu = time.perf_counter(), time.process_time()
            fuser.fuse(source, target, options).encode("jpeg")
            wall, cpu = (time.perf_counter() - start) * 1000, (time.process_time() - start_cpu) * 1000
            if run >= 3:  # warm-up
                samples[name]["wall"].append(wall)
                samples[name]["cpu"].append(cpu)
    for module, call in aside.items():
        module.on_a_thread = call  # type: ignore[attr-defined]
    load_after = os.getloadavg()
    rows = [f"| {name} | {median(s['wall']):.1f} | {median(s['cpu']):.1f} |" for name, s in samples.items()]
    lines = [
        "## Second core after the analyses: aside against inline (`benchmarks/second_core.py`)",
        "",
        (f"Machine: {machine()}. Load average (1 min) {load_before[0]:.1f} at the start, {load_after[0]:.1f} at the "
         f"end, on {os.cpu_count()} cores. `{SOURCE.name}` into `{TARGET.name}`, analysis cache off (both photos "
         f"new), JPEG encode included; {args.runs} fusions per variant after 3 warm-ups each, the variants "
         "alternating fusion by fusion in one process; medians. *aside*: the segmenter's pass over the target crop "
         "begun after align, beside the render, and the render's face masks and target triangles on a second "
         "thread beside its geometry (as shipped); *inline*: the same work on the calling thread; between: the "
         "segmenter's half aside, the render's work inline."),
        "",
        "| variant | wall ms (incl. JPEG encode) | CPU ms (process, all threads) |",
        "|---|---|---|",
        *rows,
        "",
        "Goal (issue 19): ≤ 60 ms wall and ≤ 90 ms CPU for this pair.",
    ]
    print(write_section("second_core", "\n".join(lines)).read_text())


if __name__ == "__main__":
    main()
