"""Segment starts in encoded video: a fresh encoder per segment (the pipeline until the twenty-second stop) against
the run's one encoder filing its packets into segment files (:class:`facefuse.video.io.StreamEncoder`), and one
encoder with a single segment as the reference. Each encodes the same fused frames (each portrait clip's self-swap,
fused by ``fuse_video`` and kept losslessly), x264 at the defaults (CRF 20, veryfast, no B-frames, 2 s segments).
Measured on the decoded output: the registered flicker (``facefuse_eval.motion``, the camera's move undone) minus
the input clip's, the largest step of the face's mean colour at a segment start, KB per frame and PSNR to the fused
frames. Why: the registered flicker of the 720p self-swap stayed over the input's (issue 19) while the fusion
itself, kept losslessly, flickered less than the input. Writes benchmarks/results/segment_encoding.md."""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import av
import cv2
import numpy as np
from common import machine, write_section
from video import OWN_PHOTO, PORTRAIT_SIZES, portrait_clip, portrait_face, portrait_motion, portrait_path, rgb_frames

from facefuse.fusion.engine import FusionOptions
from facefuse.pipeline import Fuser
from facefuse.video import VideoOptions, fuse_video
from facefuse.video.io import StreamEncoder, VideoInfo, probe
from facefuse_eval.motion import REGION_SHARE, stabilised


def colour_steps(frames: list[np.ndarray], size: tuple[int, int]) -> np.ndarray:
    """Frame-to-frame change of the face's mean Lab colour (L* scaled to 0–100), the camera's move undone."""
    cx, cy, side = portrait_face(size)
    steady = stabilised(frames, portrait_path(size, len(frames)), (cx - 0.75 * side, cy - 0.9 * side, 1.5 * side,
                                                                     1.7 * side), size[1] * 0.4 / side)
    height, width = steady[0].shape[:2]
    region = np.zeros((height, width), np.uint8)
    cv2.ellipse(region, (width // 2, height // 2), (int(width * REGION_SHARE[0]), int(height * REGION_SHARE[1])),
                0, 0, 360, 1, -1)
    colours = np.stack([cv2.cvtColor(f, cv2.COLOR_RGB2Lab)[region > 0].astype(np.float64).mean(0) for f in steady])
    colours[:, 0] *= 100.0 / 255.0
    return np.linalg.norm(np.diff(colours, axis=0), axis=-1)


def fresh_encoder_per_segment(frames: list[np.ndarray], info: VideoInfo, segment: int, folder: Path) -> list[Path]:
    """The pipeline's encoding until the twenty-second stop: each segment by an encoder of its own."""
    files = []
    for first in range(0, len(frames), segment):
        path = folder / f"fresh{first:05d}.mkv"
        with av.open(str(path), "w", format="matroska") as out:
            stream = out.add_stream("libx264", rate=info.rate)
            stream.width, stream.height, stream.pix_fmt = info.width, info.height, "yuv420p"
            stream.codec_context.options = {"crf": f"{VideoOptions().crf:g}", "preset": VideoOptions().preset,
                                            "x264-params": "bframes=0:scenecut=0"}
            for i, image in enumerate(frames[first:first + segment]):
                frame = av.VideoFrame.from_ndarray(image, format="rgb24").reformat(format="yuv420p")
                frame.pts = i
                out.mux(stream.encode(frame))
            out.mux(stream.encode(None))
        files.append(path)
    return files


def one_encoder(frames: list[np.ndarray], info: VideoInfo, segment: int, folder: Path) -> list[Path]:
    """The pipeline's encoding now: one encoder, its packets filed into a file per segment."""
    encoder = StreamEncoder(info, "libx264", VideoOptions().crf, None, VideoOptions().preset)
    step = round(1 / (info.rate * info.time_base))
    files = []
    for i, image in enumerate(frames):
        begins = folder / f"one{i:05d}.mkv" if i % segment == 0 else None
        files += [begins] if begins else []
        encoder.write(image, i * step, begins)
    encoder.close()
    return files


def decoded(files: list[Path]) -> tuple[list[np.ndarray], int]:
    """The files' packets decoded as one stream (as the output's remux concatenates them), and their bytes."""
    with av.open(str(files[0])) as first:
        decoder = av.CodecContext.create(first.streams.video[0].codec_context.name, "r")
        decoder.extradata = first.streams.video[0].codec_context.extradata
    images = []
    for path in files:
        with av.open(str(path)) as container:
            for packet in container.demux(container.streams.video[0]):
                if packet.size:  # each file's demuxer ends with an empty packet: the decoder's end of stream
                    images += [f.to_ndarray(format="rgb24") for f in decoder.decode(packet)]
    images += [f.to_ndarray(format="rgb24") for f in decoder.decode(None)]
    return images, sum(os.path.getsize(p) for p in files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--frames", type=int, default=150)
    args = parser.parse_args()
    fuser, rows = Fuser(), []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name, size in PORTRAIT_SIZES.items():
            clip = folder / f"{name}.mp4"
            portrait_clip(clip, size, args.frames)
            lossless = folder / f"{name}-fused.mkv"
            fuse_video(OWN_PHOTO[name], clip, lossless, FusionOptions(visible_label=False), VideoOptions(crf=0),
                       fuser=fuser)
            fused, info = rgb_frames(lossless), probe(clip)
            segment = round(VideoOptions().segment_s * info.rate)
            floor = portrait_motion(rgb_frames(clip), size).flicker
            for label, encode, length in (("a fresh encoder per segment (until now)", fresh_encoder_per_segment,
                                           segment),
                                          ("one encoder, its packets filed by segment (now)", one_encoder, segment),
                                          ("one encoder, one segment (reference)", one_encoder, len(fused))):
                images, size_bytes = decoded(encode(fused, info, length, folder))
                steps = colour_steps(images, size)
                starts = [steps[i - 1] for i in range(length, len(images), length)]
                mse = np.mean([np.mean((a.astype(np.float32) - b) ** 2) for a, b in zip(fused, images)])
                rows.append(f"| {name} portrait | {label} | {portrait_motion(images, size).flicker - floor:+.4f} | "
                            f"{max(starts) if starts else 0.0:.3f} | {np.median(steps):.3f} | "
                            f"{size_bytes / len(images) / 1024:.2f} | {10 * np.log10(255 ** 2 / mse):.2f} dB |")
            rows.append(f"| {name} portrait | the fused frames themselves (lossless) | "
                        f"{portrait_motion(fused, size).flicker - floor:+.4f} | – | "
                        f"{np.median(colour_steps(fused, size)):.3f} | – | – |")
    lines = ["## Segment starts in encoded video (`benchmarks/segment_encoding.py`)", "",
             (f"Machine: {machine()}. Each portrait clip ({args.frames} frames) fused with the photo it was made from "
              "(default options, no visible mark) and kept losslessly; those frames encoded three ways with x264 at "
              "the defaults (CRF 20, veryfast, no B-frames, 2 s segments) and decoded as one stream. Flicker: the "
              "registered flicker (the camera's move undone, `facefuse_eval.motion`) minus the input clip's (≤ 0: "
              "no more than the input); colour step: the face's mean Lab colour from one frame to the next (L* "
              "scaled to 0–100), the largest at a segment start and the median over the clip."), "",
             "| clip | encoding | flicker, output − input | colour step at a segment start, largest | colour step, "
             "median | KB/frame | PSNR to the fused frames |", "|---|---|---|---|---|---|---|", *rows]
    write_section("segment_encoding", "\n".join(lines))


if __name__ == "__main__":
    main()
