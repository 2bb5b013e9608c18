"""The video encoder's share of a frame, per x264 preset: CPU ms per frame of the pipeline's own encoder
(:class:`facefuse.video.io.StreamEncoder`, CRF 20, no B-frames, on its thread), bytes per frame and PSNR of the
decoded output to the frames given; and, per preset, the real clip fused (biden.jpg, defaults) with
benchmarks/video.py's stability measures of the output against the clip. Why: at 720p the encode stage was busy
~36 ms per frame, a quarter of a frame's CPU on two cores (issue 19); a faster preset keeps CRF's quality target
and spends bits instead of CPU. The presets take turns run by run. Writes benchmarks/results/encode_presets.md."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import REPO, machine, median, write_section

sys.path.insert(0, str(REPO / "benchmarks"))
from video import HAMILTON, SOURCE, portrait_clip, rgb_frames, stability  # noqa: E402

from facefuse.fusion.engine import FusionOptions  # noqa: E402
from facefuse.pipeline import Fuser  # noqa: E402
from facefuse.video import fuse_video  # noqa: E402
from facefuse.video.io import StreamEncoder, probe  # noqa: E402
from facefuse.video.options import VideoOptions  # noqa: E402

PRESETS = ("veryfast", "superfast", "ultrafast")


def encode(frames: list[np.ndarray], clip: Path, preset: str, out: Path) -> tuple[float, float]:
    """CPU ms per frame (the process: the encoder's thread and x264's own) and KB per frame."""
    info = probe(clip)
    start = time.process_time()
    encoder = StreamEncoder(info, "libx264", VideoOptions().crf, None, preset)
    for i, frame in enumerate(frames):
        encoder.write(frame, i * round(1 / (info.rate * info.time_base)), out if i == 0 else None)
    encoder.close()
    return (time.process_time() - start) * 1000 / len(frames), os.path.getsize(out) / len(frames) / 1024


def psnr(frames: list[np.ndarray], path: Path) -> float:
    decoded = rgb_frames(path)
    mse = float(np.mean([np.mean((a.astype(np.float32) - b) ** 2) for a, b in zip(frames, decoded)]))
    return 10 * np.log10(255 ** 2 / max(mse, 1e-9))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--frames", type=int, default=60)
    args = parser.parse_args()
    header = machine()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        clips = {}
        for name, size in (("720p portrait", (1280, 720)), ("1080p portrait", (1920, 1080))):
            path = work / f"{size[1]}.mp4"
            portrait_clip(path, size, args.frames)
            clips[f"{name}, {args.frames} frames"] = path
        clips["short_hamilton_clip.mp4 (640×360, real)"] = HAMILTON
        frames = {name: rgb_frames(path) for name, path in clips.items()}
        cpu: dict[tuple[str, str], list[float]] = {}
        size: dict[tuple[str, str], float] = {}
        quality: dict[tuple[str, str], float] = {}
        load_before = os.getloadavg()[0]
        for run in range(args.runs):
            for name, path in clips.items():
                for preset in PRESETS:
                    out = work / f"out-{preset}.mkv"
                    ms, kb = encode(frames[name], path, preset, out)
                    cpu.setdefault((name, preset), []).append(ms)
                    size[(name, preset)] = kb
                    if run == 0:
                        quality[(name, preset)] = psnr(frames[name], out)
        load_after = os.getloadavg()[0]
        fuser, clip_frames, steady = Fuser(), rgb_frames(HAMILTON), {}
        for preset in PRESETS:
            out = work / f"fused-{preset}.mp4"
            fuse_video(SOURCE, HAMILTON, out, FusionOptions(visible_label=False), VideoOptions(preset=preset),
                       fuser=fuser)
            measured = stability(fuser, clip_frames, rgb_frames(out))
            steady[preset] = tuple(measured[f"{k}_output"] - measured[f"{k}_target"]
                                   for k in ("motion", "jitter", "flicker"))
    lines = ["## Encoder presets for video (`benchmarks/encode_presets.py`)", "",
             (f"Machine: {header}. The pipeline's own segment encoder (libx264, CRF 20, no B-frames, its own "
              f"thread), {args.runs} runs per preset taking turns; CPU is the process's (every thread) per frame, "
              "median; PSNR of the decoded output to the frames encoded. Load average (1 min) at the start / end: "
              f"{load_before:.1f} / {load_after:.1f} on 2 cores."), "",
             "| clip | preset | encode CPU ms/frame | KB/frame | PSNR |", "|---|---|---|---|---|"]
    for name in clips:
        for preset in PRESETS:
            key = (name, preset)
            lines.append(f"| {name} | {preset}{' (default)' if preset == VideoOptions().preset else ''} | "
                         f"{median(cpu[key]):.1f} | {size[key]:.1f} | {quality[key]:.2f} dB |")
    lines += ["", ("The real clip fused with each preset (biden.jpg, defaults, no visible mark), output − clip as in "
                   "benchmarks/video.py's stability table (≤ 0: no more than the input):"), "",
              "| preset | motion | jitter | flicker |", "|---|---|---|---|"]
    lines += [f"| {preset} | {m:+.2f} | {j:+.2f} | {f:+.2f} |" for preset, (m, j, f) in steady.items()]
    write_section("encode_presets", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
