"""Live frames by kind: where a live session's server time per frame goes, tracked frames against the frames that
start a detection round, with the rounds run in the frame (as a video does) or aside on the session's detection
thread (the live default), in-process on the benchmark clip's 640×480 frames.

Each frame goes through :meth:`LiveSession.process_encoded` (JPEG in, labelled JPEG out: the server's work per
frame, without the socket). Two pacings: a camera's 30 frames/s (a frame is taken when due, or at once when the one
before ran late) and back to back (the server with a newer frame always waiting: the page's two in flight, or an
overloaded server). Turns of the two modes interleave, so a change of the machine's load hits both; medians over
the turns. CPU time is the whole process's (the detection thread included). Run: ``python benchmarks/live_frames.py``
(≈ 1.5 minutes).
"""

from __future__ import annotations

import argparse
import os
import time

import av
import cv2
from common import FACES, SHARED, machine, median, percentile, write_section

from facefuse import Fuser
from facefuse.config import ImageLimits
from facefuse.live import LIVE_DETECT_EVERY, LiveSession

CLIP = SHARED / "video" / "short_hamilton_clip.mp4"
CLIP_START_S, CLIP_SECONDS = 4.3, 3.8  # as benchmarks/live.py: the shot where the tracker follows the singer
SOURCE = FACES / "face_recognition" / "obama.jpg"
CAMERA_FPS = 30.0


def camera_frames() -> list[bytes]:
    """The clip's shot as the page sends it: 640×480 JPEG frames."""
    with av.open(str(CLIP)) as container:
        rate = float(container.streams.video[0].average_rate)
        first, last = round(CLIP_START_S * rate), round((CLIP_START_S + CLIP_SECONDS) * rate)
        return [cv2.imencode(".jpg", cv2.resize(f.to_ndarray(format="bgr24"), (640, 480)),
                             [cv2.IMWRITE_JPEG_QUALITY, 85])[1].tobytes()
                for i, f in zip(range(last), container.decode(video=0)) if i >= first]


def turn(fuser: Fuser, source, frames: list[bytes], count: int, aside: bool, paced: bool) -> dict:
    """``count`` frames through one new session; per frame its wall ms, its own thread's CPU ms, and whether it
    started a detection round."""
    limits = ImageLimits()
    tracked, detecting, tracked_cpu, detecting_cpu, stages = [], [], [], [], []
    fused = 0
    with LiveSession(fuser, source, detect_aside=aside) as session:
        for warm in frames[:5]:
            session.process_encoded(warm, limits)
        cpu, started = time.process_time(), time.perf_counter()
        for index in range(count):
            if paced:
                delay = started + index / CAMERA_FPS - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            rounds, following = session.tracker.detections, any(t.active for t in session.tracker.tracks)
            clock, own = time.perf_counter(), time.thread_time()
            _, frame = session.process_encoded(frames[index % len(frames)], limits)
            ms, own = (time.perf_counter() - clock) * 1000, (time.thread_time() - own) * 1000
            started_round = session.tracker.detections != rounds and following
            (detecting if started_round else tracked).append(ms)
            (detecting_cpu if started_round else tracked_cpu).append(own)
            fused += frame.fused
            stages.append({"frame": ms, **frame.timings_ms})
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {"tracked": tracked, "detecting": detecting, "tracked_cpu": tracked_cpu, "detecting_cpu": detecting_cpu,
            "fused": fused, "count": count, "wall": wall, "cpu": cpu, "stages": stages}


def slowest(turns: list[dict]) -> str:
    """Per stage, its mean ms over the fused frames near the median and over the slowest 5 % of fused frames (all
    turns of a row together): which stages make a slow frame slow."""
    fused = [s for t in turns for s in t["stages"] if "render" in s]
    ordered = sorted(fused, key=lambda s: s["frame"])
    cut = max(1, len(ordered) // 20)
    middle, tail = ordered[len(ordered) // 2 - cut:len(ordered) // 2 + cut], ordered[-cut:]
    names = [n for n in ordered[0] if n != "frame"] + ["frame"]

    def mean(group: list[dict], name: str) -> float:
        return sum(s.get(name, 0.0) for s in group) / len(group)

    return ("| frames | " + " | ".join(names) + " |\n|" + "---|" * (len(names) + 1) + "\n"
            + f"| median ({len(middle)}) | " + " | ".join(f"{mean(middle, n):.1f}" for n in names) + " |\n"
            + f"| slowest 5 % ({len(tail)}) | " + " | ".join(f"{mean(tail, n):.1f}" for n in names) + " |\n")


def row(pacing: str, aside: bool, turns: list[dict]) -> str:
    def stat(key: str, q: float) -> float:
        return median([percentile(t[key], q) if q != 50 else median(t[key]) for t in turns])

    every = median([percentile(t["tracked"] + t["detecting"], 95) for t in turns])
    cpu = median([1000 * t["cpu"] / t["count"] for t in turns])
    fps = median([t["count"] / t["wall"] for t in turns])
    fused = median([t["fused"] / t["count"] for t in turns])
    rounds = median([len(t["detecting"]) for t in turns])
    mode = "aside (detection thread)" if aside else "in the frame"
    return (f"| {pacing} | {mode} | {len(turns)} | {stat('tracked', 50):.1f} / {stat('tracked', 95):.1f} | "
            f"{stat('detecting', 50):.1f} / {stat('detecting', 95):.1f} ({rounds:.0f}) | {every:.1f} | "
            f"{stat('tracked_cpu', 50):.1f} / {stat('detecting_cpu', 50):.1f} | {fps:.1f} | "
            f"{cpu:.1f} | {100 * fused:.0f} % |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=150, help="frames per turn")
    parser.add_argument("--turns", type=int, default=3, help="turns per mode and pacing")
    parser.add_argument("--section", default="live_frames", help="results section to write (e.g. another tree's "
                        "run, with PYTHONPATH pointing at its src)")
    parser.add_argument("--title", default="Live frames by kind", help="the section's heading")
    args = parser.parse_args()
    load_before, host = os.getloadavg(), machine()
    fuser, frames = Fuser(), camera_frames()
    with LiveSession(fuser, SOURCE.read_bytes()) as first:
        source = first.prepared  # prepared once, as a server's session does, and shared by every turn
    results: dict[tuple[str, bool], list[dict]] = {}
    for _ in range(args.turns):
        for pacing in ("camera 30 frames/s", "back to back"):
            for aside in (False, True):
                results.setdefault((pacing, aside), []).append(
                    turn(fuser, source, frames, args.frames, aside, pacing != "back to back"))
    load_after = os.getloadavg()
    rows = "\n".join(row(pacing, aside, turns) for (pacing, aside), turns in results.items())
    default = results[("camera 30 frames/s", True)]
    write_section(args.section, f"""## {args.title}

`benchmarks/live_frames.py` on {host}; load average {load_before[0]:.1f} before and {load_after[0]:.1f} after. One
live session in-process (`LiveSession.process_encoded`: JPEG in, labelled JPEG out) on {len(frames)} 640×480 frames
of `short_hamilton_clip.mp4` from {CLIP_START_S:g} s in a loop, source `obama.jpg`, live defaults (detection every
{LIVE_DETECT_EVERY} frames); {args.frames} frames a turn, {args.turns} interleaved turns per row, medians over the turns.
A detection frame is one that starts a detection round over a followed face: in the frame, it waits for the
detector (and FaceMesh on faces no track follows); aside, it hands the frame to the session's detection thread and
goes on. (Rounds while no face is followed run in the frame in both modes and count as tracked frames here.) The frame's own
thread CPU leaves out what runs on other threads (the detection thread, OpenCV's and ONNX Runtime's pools).

| pacing | detection rounds | turns | tracked frame ms p50 / p95 | detection frame ms p50 / p95 (frames) | all frames ms p95 | frame's own thread CPU ms p50: tracked / detection | frames/s | process CPU ms per frame | fused |
|---|---|---|---|---|---|---|---|---|---|
{rows}

Where a slow frame's time goes (the live default: rounds aside, camera pacing; fused frames only; mean ms per stage,
wall time, the frame's time last): the frames around the median against the slowest 5 %.

{slowest(default)}""")
    print(open(os.path.join(os.path.dirname(__file__), "results", "live_frames.md")).read())


if __name__ == "__main__":
    main()
