"""Fused RGB frames to the encoder's YUV 4:2:0: FFmpeg's scaler (``VideoFrame.reformat``, what the segment encoder
ran before) against OpenCV (:mod:`facefuse.video.yuv`, what it runs now), on frames of the 720p and 1080p portrait
clips, in BT.601 (the portrait clips', which carry no colour tags) and BT.709 limited range. Per frame: CPU and wall
ms (the two converters taking turns frame by frame, medians), the planes' difference, and how far each one's frame
decodes back from the RGB given (mean and 99th percentile, 8-bit levels). Why: the scaler took ~4.6 ms of a 720p
frame's CPU (issue 19). Writes benchmarks/results/yuv_convert.md."""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import av
import numpy as np
from common import machine, median, write_section
from video import portrait_clip, rgb_frames

from facefuse.video.yuv import yuv420_frame

MATRICES = {"BT.601 (untagged)": (2, 0), "BT.709, limited range": (1, 1)}


def by_scaler(image: np.ndarray, colorspace: int, color_range: int) -> av.VideoFrame:
    return av.VideoFrame.from_ndarray(image, format="rgb24").reformat(
        format="yuv420p", dst_colorspace=colorspace or None, dst_color_range=color_range or None)


def by_opencv(image: np.ndarray, colorspace: int, color_range: int) -> av.VideoFrame:
    return yuv420_frame(image, "yuv420p", colorspace, color_range)


def timed(convert: Callable[[np.ndarray, int, int], av.VideoFrame], image: np.ndarray,
          codes: tuple[int, int]) -> tuple[float, float, av.VideoFrame]:
    wall, cpu = time.perf_counter(), time.process_time()
    frame = convert(image, *codes)
    return (time.process_time() - cpu) * 1000, (time.perf_counter() - wall) * 1000, frame


def round_trip(frame: av.VideoFrame, image: np.ndarray, codes: tuple[int, int]) -> np.ndarray:
    back = frame.to_ndarray(format="rgb24", src_colorspace=codes[0] or None, src_color_range=codes[1] or None)
    return np.abs(back.astype(np.int16) - image)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--frames", type=int, default=30)
    parser.add_argument("--turns", type=int, default=3, help="passes over the frames, the converters alternating")
    args = parser.parse_args()
    header = machine()
    load_before = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for clip_name, size in (("720p portrait", (1280, 720)), ("1080p portrait", (1920, 1080))):
            path = Path(tmp) / f"{size[1]}.mp4"
            portrait_clip(path, size, args.frames)
            frames = rgb_frames(path)
            for matrix, codes in MATRICES.items():
                times: dict[str, list[tuple[float, float]]] = {"scaler": [], "opencv": []}
                for _ in range(args.turns):
                    for image in frames:
                        for name, convert in (("scaler", by_scaler), ("opencv", by_opencv)):
                            cpu, wall, _ = timed(convert, image, codes)
                            times[name].append((cpu, wall))
                image = frames[len(frames) // 2]
                theirs, ours = by_scaler(image, *codes), by_opencv(image, *codes)
                planes = np.abs(ours.to_ndarray().astype(np.int16) - theirs.to_ndarray())
                height = image.shape[0]
                errors = {name: round_trip(frame, image, codes) for name, frame in (("scaler", theirs),
                                                                                     ("opencv", ours))}
                rows.append(
                    f"| {clip_name} | {matrix} | " + " | ".join(
                        f"{median([c for c, _ in times[n]]):.2f} / {median([w for _, w in times[n]]):.2f}"
                        for n in ("scaler", "opencv"))
                    + f" | {planes[:height].max()} / {planes[height:].mean():.2f} | "
                    + " | ".join(f"{errors[n].mean():.2f} / {np.percentile(errors[n], 99):.0f}"
                                 for n in ("scaler", "opencv")) + " |")
    lines = ["## Fused frames to YUV 4:2:0: FFmpeg's scaler against OpenCV (`benchmarks/yuv_convert.py`)", "",
             (f"Machine: {header}. {args.frames} frames of each portrait clip, {args.turns} passes, the two "
              "converters taking turns frame by frame; CPU is the process's. Planes: the largest luma difference "
              "and the mean chroma difference between the two converters' frames (levels). Round trip: each "
              "frame decoded back to RGB by FFmpeg with the same matrix, against the RGB given (mean / 99th "
              f"percentile, levels; the middle frame). Load average (1 min) at the start / end: {load_before:.1f} / "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores."), "",
             ("| clip | matrix | scaler ms CPU / wall | OpenCV ms CPU / wall | planes: luma max / chroma mean | "
              "round trip, scaler | round trip, OpenCV |"), "|---|---|---|---|---|---|---|", *rows]
    write_section("yuv_convert", "\n".join(lines))


if __name__ == "__main__":
    main()
