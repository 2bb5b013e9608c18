"""OpenCV's thread pool, one thread against one per core, on each path: a live session (the server's work per
frame, in-process), a video (decode → encode, its frames fused on a thread per core) and one photo fusion.

Why: OpenCV's pool defaults to a thread per core, and every call a fusion makes on a large array (remaps, blurs,
colour conversions) is split across it. When another fusion, the encoder or the browser already keeps the other
core busy, the split buys little and its hand-offs cost CPU; `facefuse serve` sizes the pool as it sizes ONNX
Runtime's sessions, a worker's share of the cores (`facefuse.cli.serve_cmd.size_opencv_pool`). The settings take
turns run by run (`cv2.setNumThreads` in this one process), so a change of the machine's load hits both; medians.
Writes benchmarks/results/opencv_pool.md.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import cv2
from common import FACES, machine, median, percentile, write_section
from live_frames import SOURCE as LIVE_SOURCE
from live_frames import camera_frames, turn
from video import SOURCE as VIDEO_SOURCE
from video import portrait_clip

from facefuse.allocator import keep_freed_memory
from facefuse.fusion.engine import FusionOptions
from facefuse.pipeline import Fuser, FuserConfig
from facefuse.video import fuse_video

SETTINGS = (1, 2)  # OpenCV threads: one, one per core of this machine
PHOTO = (FACES / "face_recognition/biden.jpg", FACES / "face_recognition/obama-720p.jpg")


def live_turn(fuser: Fuser, frames: list[bytes], count: int) -> dict[str, float]:
    """One live session at a camera's pace: CPU ms per frame (the process's) and the frames' server time."""
    done = turn(fuser, LIVE_SOURCE.read_bytes(), frames, count, aside=True, paced=True)
    times = done["tracked"] + done["detecting"]
    return {"cpu": done["cpu"] * 1000 / done["count"], "p50": median(times), "p95": percentile(times, 95)}


def video_turn(fuser: Fuser, clip: Path, out: Path) -> dict[str, float]:
    start = time.process_time()
    result = fuse_video(VIDEO_SOURCE, clip, out, fuser=fuser)
    return {"fps": result.fps, "cpu": (time.process_time() - start) * 1000 / result.frames}


def photo_turn(fuser: Fuser, runs: int) -> dict[str, float]:
    source, target = (p.read_bytes() for p in PHOTO)
    walls, cpus = [], []
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        fuser.fuse(source, target, FusionOptions()).encode("jpeg")
        walls.append((time.perf_counter() - wall) * 1000)
        cpus.append((time.process_time() - cpu) * 1000)
    return {"wall": median(walls), "cpu": median(cpus)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=4, help="turns of each setting per path")
    parser.add_argument("--live-frames", type=int, default=150)
    parser.add_argument("--photos", type=int, default=15, help="photo fusions per turn")
    args = parser.parse_args()
    keep_freed_memory()  # as the CLI and the server do for their process (facefuse.allocator)
    host, load_before = machine(), os.getloadavg()[0]
    fuser, uncached = Fuser(), Fuser(FuserConfig(analysis_cache_mb=0))
    frames = camera_frames()
    results: dict[str, dict[int, list[dict[str, float]]]] = {p: {n: [] for n in SETTINGS}
                                                              for p in ("live", "video", "photo")}
    with tempfile.TemporaryDirectory(prefix="facefuse-opencv-pool-") as folder:
        clip = Path(folder) / "portrait720.mp4"
        portrait_clip(clip, (1280, 720), 60)
        video_turn(fuser, clip, Path(folder) / "warm.mp4")
        photo_turn(uncached, 3)
        for _ in range(args.turns):
            for threads in SETTINGS:
                cv2.setNumThreads(threads)
                results["live"][threads].append(live_turn(fuser, frames, args.live_frames))
                results["video"][threads].append(video_turn(fuser, clip, Path(folder) / "out.mp4"))
                results["photo"][threads].append(photo_turn(uncached, args.photos))
    load_after = os.getloadavg()[0]

    def cell(path: str, threads: int, key: str) -> str:
        return f"{median([r[key] for r in results[path][threads]]):.1f}"

    lines = ["## OpenCV's thread pool: one thread against one per core, per path (`benchmarks/opencv_pool.py`)", "",
             f"Machine: {host}; load average (1 min) {load_before:.1f} at the start, {load_after:.1f} at the end. "
             f"{args.turns} turns of each setting per path, taking turns (`cv2.setNumThreads` in one process), "
             f"medians of the turns. Live: a `LiveSession` on {args.live_frames} of the benchmark clip's 640×480 "
             "JPEG frames at a camera's 30 frames/s (`benchmarks/live_frames.py`'s turn: the server's work per "
             "frame, its detection rounds aside); CPU is the process's per frame. Video: the 720p portrait clip "
             f"(60 frames, `biden.jpg`), decode → encode. Photo: `biden.jpg` into `obama-720p.jpg`, {args.photos} "
             "fusions per turn, both photos new, JPEG encode included.", "",
             "| path | measure | OpenCV 1 thread | OpenCV 2 threads (one per core) |", "|---|---|---|---|"]
    rows = [("live", "CPU ms per frame", "cpu"), ("live", "server ms per frame, p50", "p50"),
            ("live", "server ms per frame, p95", "p95"), ("video", "frames/s (wall)", "fps"),
            ("video", "CPU ms per frame", "cpu"), ("photo", "wall ms", "wall"), ("photo", "CPU ms", "cpu")]
    lines += [f"| {path} | {label} | {cell(path, 1, key)} | {cell(path, 2, key)} |" for path, label, key in rows]
    print(write_section("opencv_pool", "\n".join(lines)))


if __name__ == "__main__":
    main()
