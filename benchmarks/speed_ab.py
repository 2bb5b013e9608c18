"""Per-stage speed of this tree against an earlier commit (default: main), on the same machine at the same time.

Why: the machine is shared, so figures taken an hour apart differ by more than most changes. Here the two source
trees take turns: child processes alternate, base then this tree, each timing a warm photo fusion (720p target,
both photos new) and a video fusion (720p and 1080p portrait clips, one face, decode → encode), and the medians
over all turns are compared stage by stage, wall time beside the process's CPU time. Writes
benchmarks/results/speed_ab.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

# the variables facefuse's import sets when the caller has not (facefuse/__init__.py), noted before this script's
# own import sets them: each tree's child starts without them, so it runs with its own tree's defaults
SET_BY_IMPORT = {name for name in ("ORT_DISABLE_TELEMETRY", "OPENCV_THREAD_POOL_ACTIVE_WAIT_WORKER",
                                   "OPENCV_THREAD_POOL_ACTIVE_WAIT_PAUSE_LIMIT") if name not in os.environ}

from common import FACES, REPO, machine, median, write_section  # noqa: E402
from fusion_speed import four_k_jpeg  # noqa: E402
from phone_photos import phone_jpeg  # noqa: E402
from video import portrait_clip  # noqa: E402

SOURCE = FACES / "face_recognition/biden.jpg"
TARGET = FACES / "face_recognition/obama-720p.jpg"

# one turn of one tree: warm up, then time photo fusions and video fusions; prints one JSON line
CHILD = r"""
import json, sys, threading, time
from pathlib import Path
from facefuse.fusion.engine import FusionOptions
from facefuse.pipeline import Fuser, FuserConfig
from facefuse.stages import base
from facefuse.video import fuse_video
source, target, runs = Path(sys.argv[1]).read_bytes(), Path(sys.argv[2]).read_bytes(), int(sys.argv[3])
clips, out, cache_mb = json.loads(sys.argv[4]), Path(sys.argv[5]), int(sys.argv[6])
# each stage's CPU time on the thread that ran it (thread_time: stages of other frames or of the other photo run
# at the same time on other threads, so the process's clock cannot be split by stage)
stage_cpu, lock, timed = {}, threading.Lock(), base._timed
def cpu_timed(stage, record, *step):
    start = time.thread_time()
    done = timed(stage, record, *step)
    key = ("source_" if record.role == "source" else "") + stage.name
    with lock:
        stage_cpu[key] = stage_cpu.get(key, 0.0) + (time.thread_time() - start) * 1000
    return done
base._timed = cpu_timed
try:  # the allocator tuning the CLI and the server apply to their process, where the tree has it
    from facefuse.allocator import keep_freed_memory
    keep_freed_memory()
except ImportError:
    pass
fuser, options = Fuser(FuserConfig(analysis_cache_mb=cache_mb)), FusionOptions()
for _ in range(3):
    fuser.fuse(source, target, options)
photo = []
for _ in range(runs):
    stage_cpu.clear()
    wall, cpu = time.perf_counter(), time.process_time()
    result = fuser.fuse(source, target, options)
    result.encode("jpeg")
    photo.append({**result.timings_ms, "wall": (time.perf_counter() - wall) * 1000,
                  "cpu": (time.process_time() - cpu) * 1000, **{k + " cpu": v for k, v in stage_cpu.items()}})
video = {}
for name, clip in clips.items():
    stage_cpu.clear()
    cpu = time.process_time()
    result = fuse_video(sys.argv[1], clip, out, fuser=fuser)
    video[name] = {**{k: v * 1000 / result.frames for k, v in result.timings_s.items()}, "fps": result.fps,
                   "cpu": (time.process_time() - cpu) * 1000 / result.frames,
                   **{k + " cpu": v / result.frames for k, v in stage_cpu.items()}}
print(json.dumps({"photo": photo, "video": video}))
"""

PHOTO_STAGES = ["decode", "detect", "landmarks", "gate", "restore", "render", "align", "segment", "relight",
                "blend", "label"]
# the source's slice (its segment stage parses the source face, where the tree has it: a cell without it reads –)
PHOTO_ROWS = [f"source_{s}" for s in [*PHOTO_STAGES[:6], "segment"]] + PHOTO_STAGES + ["total", "wall", "cpu"]
VIDEO_ROWS = ["decode", "track", "fuse", "align", "render", "segment", "relight", "blend", "label", "encode", "cpu",
              "fps"]
VIDEO_CPU_ROWS = {"align", "render", "segment", "relight", "blend", "label"}  # the frame's stages (fuse_frame)
LABELS = {"wall": "total incl. JPEG encode (wall)", "cpu": "CPU ms (process, all threads)",
          "fps": "frames/s (wall)", "encode": "encode (busy)",
          "fuse": "fuse (render + segment + blend + label)"}


def base_tree(ref: str, folder: Path) -> Path:
    """``ref``'s src/ unpacked into ``folder`` (git archive: no checkout, the work tree is left alone)."""
    data = subprocess.run(["git", "-C", str(REPO), "archive", ref, "src"], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(data)) as archive:
        archive.extractall(folder, filter="data")
    return folder / "src"


def turn(src: Path, source: Path, target: Path, runs: int, clips: dict[str, str], out: Path, cache_mb: int) -> dict:
    env = {**{k: v for k, v in os.environ.items() if k not in SET_BY_IMPORT}, "PYTHONPATH": str(src)}
    done = subprocess.run([sys.executable, "-c", CHILD, str(source), str(target), str(runs), json.dumps(clips),
                           str(out), str(cache_mb)], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base", default="main", help="the commit to compare with")
    parser.add_argument("--turns", type=int, default=3, help="turns of each tree (alternating)")
    parser.add_argument("--runs", type=int, default=10, help="photo fusions per turn")
    parser.add_argument("--frames", type=int, default=30, help="frames of each video clip (0: no video)")
    parser.add_argument("--target", choices=["720p", "4k"], default="720p",
                        help="the photo's target: obama-720p.jpg, or fusion_speed.py's 4K JPEG (a large face)")
    parser.add_argument("--section", default="speed_ab", help="results section to write (one per check kept)")
    parser.add_argument("--title", default="", help="the section's heading (default: Speed, stage by stage, against BASE)")
    parser.add_argument("--seen", action="store_true",
                        help="both photos seen before (the analysis cache on, as a template is) instead of new")
    parser.add_argument("--source", default=str(SOURCE.relative_to(FACES)),
                        help="the source photo under ../shared/faces (e.g. a turned one: the mirror fill's cost)")
    parser.add_argument("--phone", action="store_true",
                        help="the source scaled up to a phone photo's 4000 px (tests/phone_photos.py)")
    args = parser.parse_args()
    source = FACES / args.source
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        trees = {"base": base_tree(args.base, work / "base"), "this": REPO / "src"}
        target = TARGET
        if args.phone:
            source = work / f"phone-{source.stem}.jpg"
            source.write_bytes(phone_jpeg(FACES / args.source))
        if args.target == "4k":
            target = work / "obama-4k.jpg"
            target.write_bytes(four_k_jpeg())
        clips = {}
        for name, size in (("720p", (1280, 720)), ("1080p", (1920, 1080))):
            if args.frames > 0:
                clips[name] = str(work / f"{name}.mp4")
                portrait_clip(Path(clips[name]), size, args.frames)
        samples: dict[str, list[dict]] = {name: [] for name in trees}
        for _ in range(args.turns):
            for name, src in trees.items():
                samples[name].append(turn(src, source, target, args.runs, clips, work / "out.mp4",
                                          64 if args.seen else 0))
    load_after = os.getloadavg()

    def photo(name: str, stage: str) -> str:
        """The median, or "–" where that tree's photo fusion does not report the stage."""
        values = [run[stage] for t in samples[name] for run in t["photo"] if stage in run]
        return f"{median(values):.1f}" if values else "–"

    def video(name: str, clip: str, stage: str) -> str:
        values = [t["video"][clip][stage] for t in samples[name] if stage in t["video"][clip]]
        return f"{median(values):.1f}" if values else "–"

    def both(cell, *where: str, stage: str, cpu_rows: set[str] | list[str]) -> str:
        """Wall ms, and the stage's CPU ms on its own thread where the stage has one."""
        return cell(*where, stage) + (f" / {cell(*where, stage + ' cpu')}" if stage in cpu_rows else "")

    target_label = "`obama-720p.jpg`" if args.target == "720p" else "a 3840×2160 JPEG (fusion_speed.py's 4K case)"
    lines = [f"## {args.title or 'Speed, stage by stage, against `' + args.base + '`'} (`benchmarks/speed_ab.py`)", "",
             (f"Machine: {machine()}. The two source trees took turns ({args.turns} turns each, child processes "
              f"alternating), so both saw the same neighbours; load average (1 min) {load_before[0]:.1f} at the "
              f"start, {load_after[0]:.1f} at the end, on {os.cpu_count()} cores: wall times are inflated by "
              "that load, CPU times less so. Photo: warm `Fuser`, " + ("analysis cache on (both photos seen before, "
              "the default 64 MB), " if args.seen else "analysis cache off (both photos new), ") +
              f"`{args.source}`{' scaled up to 4000 px (tests/phone_photos.py)' if args.phone else ''} into {target_label}, {args.runs} fusions per turn after 3 warm-ups, median ms. " +
              (f"Video: portrait clips of {args.frames} frames (one face, a slow camera move), decode → encode, "
               "median ms per frame that each stage was busy (in this tree the stages run on their own threads "
               "and overlap, so they add up to more than the wall time). " if clips else "No video. ") +
              "Stage cells are wall / CPU ms, the CPU "
              "time of the thread that ran the stage (`time.thread_time`); ONNX Runtime's own pool threads, where "
              "a session has more than one, count only in the process's CPU row. A photo's two analyses overlap on "
              "two threads in this tree, so its stage walls add up to more than its total; this tree's child also "
              "applies the allocator tuning its CLI and server apply to their process (`facefuse.allocator`)."), "",
             f"| photo stage (ms: wall / CPU) | {args.base} | this tree |", "|---|---|---|"]
    lines += [f"| {LABELS.get(s, s)} | " + " | ".join(both(photo, n, stage=s, cpu_rows=PHOTO_ROWS[:-3]) for n in trees) + " |"
              for s in PHOTO_ROWS]
    if not clips:
        print(write_section(args.section, "\n".join(lines)).read_text())
        return
    lines += ["", (f"| video stage (ms per frame: busy / CPU) | 720p {args.base} | 720p this tree | 1080p {args.base} "
              "| 1080p this tree |"), "|---|---|---|---|---|"]
    lines += [f"| {LABELS.get(s, s)} | " + " | ".join(both(video, n, c, stage=s, cpu_rows=VIDEO_CPU_ROWS) for c in clips for n in trees) + " |"
              for s in VIDEO_ROWS]
    print(write_section(args.section, "\n".join(lines)).read_text())


if __name__ == "__main__":
    main()
