"""Where a video frame's CPU goes: per thread of the process (the tracking thread, the fusion threads, the encoder's
Python thread, FFmpeg's own encoder and decoder threads, the decoder's Python thread) and the tracking thread's
work split into its steps (scene-cut check, FaceMesh following the faces, detection rounds, smoothing, the gate's
measure, the turns). Why: the track stage was "busy" ~27 ms a 720p frame (issue 19), a wall-clock figure on two
shared cores that says nothing of what it spends; and the process's CPU per frame is what caps frames/s on two
cores (≤ ~100 ms a frame for 20 frames/s). Each thread's CPU comes from /proc (utime + stime), the steps from
``time.thread_time`` around them on the tracking thread. Runs take turns clip by clip; medians.
Writes benchmarks/results/<section>.md (default video_cpu).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
from common import machine, median, write_section
from video import SOURCE, portrait_clip

from facefuse.allocator import keep_freed_memory
from facefuse.analysis.landmarks import FaceMesh
from facefuse.pipeline import Fuser
from facefuse.video import fuse_video
from facefuse.video.fuse import _Run
from facefuse.video.tracking import FaceTracker, OneEuroFilter, SceneCuts
from facefuse.stages.gate import Gate
from facefuse.video.turns import FaceTurns

TICK = os.sysconf("SC_CLK_TCK")
SAMPLE_S = 0.25  # how often the threads' CPU is read (threads live the whole run, so the last reading counts)
# the tracking thread's steps: (label, class, method); nested steps are reported inside their parent's time
STEPS = (("track (whole step)", _Run, "_track"),
         ("scene-cut check", SceneCuts, "__call__"),
         ("FaceMesh following the faces", FaceTracker, "_follow"),
         ("  of which: crop (warpAffine)", FaceMesh, "crop"),
         ("  of which: points to the image", FaceMesh, "_to_image"),
         ("detection rounds (detector, new faces' landmarks)", FaceTracker, "_look"),
         ("tracked faces (smoothing, pose, gate measure)", FaceTracker, "_tracked"),
         ("  of which: One-Euro smoothing", OneEuroFilter, "__call__"),
         ("  of which: gate measure (sharpness)", Gate, "measured"),
         ("face choice", FaceTracker, "chosen"),
         ("turns (colour, masks, render carry)", FaceTurns, "take"))


def instrument(totals: dict[str, float]) -> Callable[[], None]:
    """Wrap each step so its CPU time on the main (tracking) thread adds to ``totals``; returns the undo."""
    main = threading.main_thread()
    originals = []
    for label, owner, name in STEPS:
        original = owner.__dict__[name]
        originals.append((owner, name, original))
        static = isinstance(original, staticmethod)

        def timed(*args, _original=original.__func__ if static else original, _label=label, **kwargs):
            if threading.current_thread() is not main:
                return _original(*args, **kwargs)
            start = time.thread_time()
            try:
                return _original(*args, **kwargs)
            finally:
                totals[_label] += time.thread_time() - start

        setattr(owner, name, staticmethod(timed) if static else timed)

    def undo() -> None:
        for owner, name, original in originals:
            setattr(owner, name, original)
    return undo


def thread_cpu() -> dict[str, tuple[str, float]]:
    """Each thread of this process: its name (comm) and CPU seconds so far."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            comm = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
            fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[tid] = (comm, (int(fields[11]) + int(fields[12])) / TICK)
    return out


def one_run(fuser: Fuser, clip: Path, out: Path,
            opencv_threads: int) -> tuple[dict[str, float], dict[str, float], float, float]:
    """Per-thread-group and per-step CPU ms per frame, process CPU ms per frame, frames/s of one fusion with
    OpenCV's pool at ``opencv_threads`` (started before the run, so its threads count as existing ones)."""
    cv2.setNumThreads(opencv_threads)
    cv2.resize(np.zeros((2160, 3840, 3), np.uint8), (1920, 1080))  # a parallel call: the pool starts now
    before = thread_cpu()
    names: dict[str, str] = {}
    last: dict[str, tuple[str, float]] = {}
    done = threading.Event()

    def sample() -> None:
        while True:
            for thread in threading.enumerate():
                if thread.native_id is not None:
                    names[str(thread.native_id)] = thread.name
            last.update(thread_cpu())
            if done.wait(SAMPLE_S):
                return

    steps: dict[str, float] = defaultdict(float)
    undo = instrument(steps)
    sampler = threading.Thread(target=sample, name="benchmark-sampler", daemon=True)
    sampler.start()
    cpu = time.process_time()
    try:
        result = fuse_video(SOURCE, clip, out, fuser=fuser)
    finally:
        cpu = time.process_time() - cpu
        done.set()
        sampler.join()
        undo()
    last.update(thread_cpu())
    groups: dict[str, float] = defaultdict(float)
    for tid, (comm, seconds) in last.items():
        name = names.get(tid)
        if name == "benchmark-sampler":
            continue
        if name is None:  # not a Python thread: FFmpeg's (x264's inherit the process's name) or a library's pool
            name = (f"native threads that existed before the run: OpenCV's pool ({comm})" if tid in before else
                    "FFmpeg's decoder threads (av:*)" if comm.startswith("av:") else
                    f"threads started during the run: x264's encoder threads ({comm})")
        elif name == "MainThread":
            name = "tracking thread (main: decode wait, track, hand-over, write)"
        else:
            name = name.rstrip("0123456789_")
        groups[name] += (seconds - before.get(tid, (comm, 0.0))[1]) * 1000 / result.frames
    return (dict(groups), {k: v * 1000 / result.frames for k, v in steps.items()}, cpu * 1000 / result.frames,
            result.fps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3, help="runs of each clip (taking turns)")
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--opencv-threads", type=int, default=0,
                        help="also time every clip with OpenCV's pool at this many threads (0: not)")
    parser.add_argument("--section", default="video_cpu")
    parser.add_argument("--title", default="Where a video frame's CPU goes")
    args = parser.parse_args()
    keep_freed_memory()
    header = machine()
    load_before = os.getloadavg()[0]
    fuser = Fuser()
    default_threads = cv2.getNumThreads()
    variants = {f"OpenCV {default_threads} threads": default_threads}
    if args.opencv_threads:
        variants[f"OpenCV {args.opencv_threads} thread{'s' if args.opencv_threads > 1 else ''}"] = args.opencv_threads
    samples: dict[str, list] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        clips = {}
        for name, size in (("720p", (1280, 720)), ("1080p", (1920, 1080))):
            clips[name] = work / f"{name}.mp4"
            portrait_clip(clips[name], size, args.frames)
            fuse_video(SOURCE, clips[name], work / "warm.mp4", fuser=fuser)
        for _ in range(args.runs):
            for name, clip in clips.items():
                for variant, threads in variants.items():
                    samples[f"{name}, {variant}"].append(one_run(fuser, clip, work / "out.mp4", threads))
    cv2.setNumThreads(default_threads)
    load_after = os.getloadavg()[0]

    def cell(name: str, part: int, key: str) -> str:
        values = [run[part].get(key, 0.0) for run in samples[name]]
        return f"{median(values):.1f}"

    lines = [f"## {args.title} (`benchmarks/video_cpu.py`)", "",
             (f"Machine: {header}; load average (1 min) {load_before:.1f} at the start, {load_after:.1f} at the end "
              f"on {os.cpu_count()} cores. Portrait clips of {args.frames} frames (one face, a slow camera move), "
              f"`biden.jpg`, defaults, decode → encode, {args.runs} runs per clip taking turns after a warm-up; "
              "median CPU ms per frame. Threads: utime + stime from /proc (read every "
              f"{SAMPLE_S:g} s and at the end). Steps: `time.thread_time` around each on the tracking thread. "
              f"Variants: {', '.join(variants)} (OpenCV's default: one per core), taking turns run by run.")]
    columns = list(samples)
    head = "| " + " | ".join(columns) + " |"
    groups = sorted({k for runs in samples.values() for run in runs for k in run[0]},
                    key=lambda k: -median([r[0].get(k, 0.0) for r in samples[columns[0]]]))
    lines += ["", "| thread (CPU ms per frame) " + head, "|---" * (len(columns) + 1) + "|"]
    lines += [f"| {g} | " + " | ".join(cell(c, 0, g) for c in columns) + " |" for g in groups]
    lines += ["| process, all threads | " + " | ".join(f"{median([r[2] for r in samples[c]]):.1f}" for c in columns)
              + " |",
              "| frames/s (wall) | " + " | ".join(f"{median([r[3] for r in samples[c]]):.1f}" for c in columns) + " |",
              "", "| tracking thread's step (CPU ms per frame) " + head, "|---" * (len(columns) + 1) + "|"]
    lines += [f"| {label} | " + " | ".join(cell(c, 1, label) for c in columns) + " |" for label, _, _ in STEPS]
    print(write_section(args.section, "\n".join(lines)).read_text())


if __name__ == "__main__":
    main()
