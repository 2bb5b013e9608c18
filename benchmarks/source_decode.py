"""Would a large source JPEG decoded at a reduced DCT scale (OpenCV's IMREAD_REDUCED_COLOR_2 / _4, what Pillow's
draft mode does too) save the photo path its source decode, without lowering identity? Two measurements side by side:
the decode's CPU time at each scale (medians of interleaved runs, this thread's CPU clock), and the side of the crop
at which the source face would be at its photo's own resolution (``mesh_engine.face_crop_size`` with no cap) at that
scale, against the crop the render asks for (the 720p target of fusion_speed.py: ``face_crop_size`` at the default
``crop_size``). A reduced decode is only free where the reduced face still fills the render's crop.
Writes benchmarks/results/source_decode.md."""

from __future__ import annotations

import argparse
import os
import time

import cv2
import numpy as np
from common import FACES, machine, median, write_section

from facefuse.allocator import keep_freed_memory
from facefuse.fusion.engine import FusionOptions
from facefuse.fusion.mesh_engine import face_crop_size
from facefuse.pipeline import Fuser, FuserConfig

SOURCES = ["face_recognition/biden.jpg", "face_recognition/obama.jpg", "face_recognition/obama-1080p.jpg"]
TARGET = "face_recognition/obama-720p.jpg"  # fusion_speed.py's 720p target
RGB = cv2.IMREAD_COLOR_RGB | cv2.IMREAD_IGNORE_ORIENTATION  # as imageio.decode_image decodes
SCALES = {1: RGB, **{s: (flag & ~cv2.IMREAD_COLOR) | RGB  # the reduced flags carry BGR's bit: RGB instead
                     for s, flag in ((2, cv2.IMREAD_REDUCED_COLOR_2), (4, cv2.IMREAD_REDUCED_COLOR_4))}}
UNCAPPED = 8192  # face_crop_size's cap, high enough never to bind: the face's own resolution


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    load_before = os.getloadavg()
    keep_freed_memory()  # as the CLI and the server do for their process (fusion_speed.py too)
    fuser = Fuser(FuserConfig(analysis_cache_mb=0))
    need = face_crop_size(fuser.analyze(FACES / TARGET, "target").faces[0].keypoints, FusionOptions().crop_size)
    rows = []
    for name in SOURCES:
        data = np.frombuffer((FACES / name).read_bytes(), np.uint8)
        analysis = fuser.analyze(FACES / name, "source")
        keypoints = analysis.faces[0].keypoints
        cpu: dict[int, list[float]] = {scale: [] for scale in SCALES}
        for _ in range(args.runs):  # the scales take turns, so a noisy neighbour slows all of them alike
            for scale, flag in SCALES.items():
                start = time.thread_time()
                cv2.imdecode(data, flag)
                cpu[scale].append((time.thread_time() - start) * 1000)
        height, width = analysis.image.shape[:2]
        cells = [f"{median(cpu[s]):.1f} ms, face at {face_crop_size(keypoints / s, UNCAPPED)} px" for s in SCALES]
        rows.append(f"| `{name.split('/')[-1]}` ({width}×{height}) | " + " | ".join(cells) + " |")
    load_after = os.getloadavg()
    lines = [
        "## Source decode at a reduced DCT scale (`benchmarks/source_decode.py`)",
        "",
        (f"Machine: {machine()}. Load average (1 min) {load_before[0]:.1f} at the start, {load_after[0]:.1f} at the "
         f"end. Each cell: the decode's CPU ms (median of {args.runs} interleaved runs, `cv2.imdecode` at that scale) "
         "and the crop side at which the source face is at that decode's own resolution; the render's crop for "
         f"`{TARGET.split('/')[-1]}` is {need} px (the default `crop_size` caps it at {FusionOptions().crop_size})."),
        "",
        "| source | full scale | 1/2 | 1/4 |",
        "|---|---|---|---|",
        *rows,
    ]
    print(write_section("source_decode", "\n".join(lines)).read_text())


if __name__ == "__main__":
    main()
