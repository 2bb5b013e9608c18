"""Do this tree's fusions give the same pixels as an earlier commit's (default: main)? The check behind a speed change
that must not change what is computed.

Each tree fuses, in a child process of its own, six photo pairs from ../shared/faces (two of them also with
``light="shape"``), the first source on a 4K target (fusion_speed.py's, a large face), six frames of the shared
Hamilton clip through ``Fuser.fuse_frame`` and six of its first 24 frames through a ``LiveSession``; the outputs are compared pixel by pixel: mean absolute difference over
the whole picture, PSNR, the largest difference, and the share of pixels that differ. Writes benchmarks/results/outputs_ab.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from common import FACES, SHARED, write_section
from fusion_speed import four_k_jpeg
from speed_ab import base_tree
from video import portrait_clip

PAIRS = [("face_recognition/biden.jpg", "face_recognition/obama-720p.jpg"),
         ("face_recognition/obama.jpg", "hard/makeup/01_blue_smoky_eyes_red_lipstick.png"),
         ("hard/beard/03_full_black_beard.jpg", "hard/glasses/05_thick_dark_frames.jpg"),
         ("face_recognition/lin-manuel-miranda.png", "hard/sidelight/01_lowkey_studio_woman.jpg"),
         ("hard/makeup/04_heavy_pink_blush_lips.png", "face_recognition/obama-1080p.jpg"),
         ("face_recognition/alex-lacamoire.png", "hard/occluded/02_hand_over_eye.jpg")]
CLIP = SHARED / "video" / "short_hamilton_clip.mp4"
TURNED = "hard/profile/01_turned_45.jpg"  # the source of the video rows: turned 41°, the portrait clip's face ~0°

# one tree's outputs, saved as one .npz
CHILD = r"""
import json, sys
from pathlib import Path
import cv2, numpy as np
from facefuse.fusion.engine import FusionOptions
from facefuse.pipeline import Fuser, FuserConfig
faces, pairs, clip, out, four_k = Path(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
fuser, found = Fuser(FuserConfig(analysis_cache_mb=0)), {}
for i, (source, target) in enumerate(pairs):
    # each tree's default light, and for the first two pairs the shape light too
    for label, options in [("defaults", FusionOptions()), ("light=shape", FusionOptions(light="shape"))][:2 if i < 2 else 1]:
        found[f"photo {i + 1}, {label}"] = fuser.fuse(faces / source, faces / target, options).image
found["photo 1, 4K target"] = fuser.fuse(faces / pairs[0][0], Path(four_k), FusionOptions()).image
prepared, capture = fuser.prepare(faces / pairs[0][0], FusionOptions()), cv2.VideoCapture(clip)
for k in range(6):
    for _ in range(8):
        ok, bgr = capture.read()
    rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    analysis = fuser.analyze(rgb, "target")
    if analysis.faces:
        found[f"clip frame {8 * (k + 1)}"] = fuser.fuse_frame(prepared, rgb, analysis.faces[:1], FusionOptions()).image
from facefuse.live import LiveSession
capture = cv2.VideoCapture(clip)
with LiveSession(fuser, (faces / pairs[0][0]).read_bytes(), detect_aside=False) as session:
    for k in range(24):
        ok, bgr = capture.read()
        shown = session.process(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), k / 30)
        if k % 4 == 3:
            found[f"live frame {k}"] = shown.image
# a turned source (41° against the clip's frontal face: the mirror fill in every frame) through fuse_video, whose
# tracks carry the segmenter output and the render's carry between frames; its frames decoded again
import av
from facefuse.video import VideoOptions, fuse_video
# CRF 0: x264 lossless, so the frames compare as fused (after the conversion to YUV 4:2:0), not as re-encoded
fuse_video(faces / sys.argv[7], sys.argv[6], Path(out).with_suffix(".mp4"), video=VideoOptions(crf=0), fuser=fuser)
with av.open(str(Path(out).with_suffix(".mp4"))) as video:
    for k, frame in enumerate(video.decode(video=0)):
        if k < 9:
            found[f"video frame {k} (turned source)"] = frame.to_ndarray(format="rgb24")
# the whole shared clip through fuse_video from the first source, losslessly: compared frame by frame by the parent
fuse_video(faces / pairs[0][0], clip, Path(out).with_suffix(".clip.mkv"), video=VideoOptions(crf=0), fuser=fuser)
np.savez_compressed(out, **found)
"""


def outputs(src: Path, out: Path, four_k: Path, portrait: Path) -> dict[str, np.ndarray]:
    subprocess.run([sys.executable, "-c", CHILD, str(FACES), json.dumps(PAIRS), str(CLIP), str(out), str(four_k),
                    str(portrait), TURNED],
                   env={**os.environ, "PYTHONPATH": str(src)}, check=True)
    with np.load(out) as saved:
        return dict(saved)


def whole_clip(base: Path, this: Path, name: str) -> str:
    """One line on two trees' lossless fuse_video outputs of the whole clip: frames identical, worst PSNR."""
    import av

    def frames(path: Path) -> list[np.ndarray]:
        with av.open(str(path)) as video:
            return [frame.to_ndarray(format="rgb24") for frame in video.decode(video=0)]

    a, b = frames(base), frames(this)
    if len(a) != len(b):
        return f"`{name}` through `fuse_video` (CRF 0): {len(a)} frames against {len(b)}."
    mse = [float(np.mean((x.astype(np.float64) - y) ** 2)) for x, y in zip(a, b)]
    worst = max(mse)
    psnr = "∞" if worst == 0 else f"{10 * np.log10(255 ** 2 / worst):.1f} dB"
    return (f"The whole `{name}` through `fuse_video` from the first source (CRF 0, lossless): "
            f"{sum(m == 0 for m in mse)} of {len(mse)} frames identical, worst frame's PSNR {psnr}.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base", default="main", help="the commit to compare with")
    parser.add_argument("--section", default="outputs_ab", help="results section to write (one per check kept)")
    parser.add_argument("--title", default="", help="the section's heading (default: Outputs against BASE)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        four_k = work / "4k.jpg"
        four_k.write_bytes(four_k_jpeg())
        portrait = work / "portrait.mp4"
        portrait_clip(portrait, (1280, 720), 20)
        base = outputs(base_tree(args.base, work / "base"), work / "base.npz", four_k, portrait)
        this = outputs(Path(__file__).resolve().parents[1] / "src", work / "this.npz", four_k, portrait)
        clip_row = whole_clip(work / "base.clip.mkv", work / "this.clip.mkv", CLIP.name)
    lines = [f"## {args.title or f'Outputs against `{args.base}`'} (`benchmarks/outputs_ab.py`)", "",
             (f"The same fusions by `{args.base}` and by this tree, each in a child process: six photo pairs of "
              "`../shared/faces` (the first two also with `light=\"shape\"`), the first source on a 4K target and "
              "six frames of `short_hamilton_clip.mp4` through `Fuser.fuse_frame` (no track: nothing carried), and every "
              "fourth of its first 24 frames through one `LiveSession` (detection in the frame, so both trees "
              "see the same rounds; what a track carries between frames may differ), and the first 9 frames of a 20-frame 720p "
              f"portrait clip (benchmarks/video.py's) fused by `fuse_video` from `{TURNED}` (turned 41°, the clip's "
              "face ~0°: the mirror fill in every frame), encoded losslessly (CRF 0) and decoded again. Differences in 8-bit levels; "
              "PSNR over the whole picture (∞: identical)."), "",
             "| output | same size | mean abs. difference (whole picture) | PSNR | largest | pixels that differ |",
             "|---|---|---|---|---|---|"]
    for name in [*this, *(n for n in base if n not in this)]:  # in the order they were made
        if name not in base or name not in this:
            lines.append(f"| {name} | only in {'this tree' if name in this else args.base} | – | – | – | – |")
            continue
        a, b = base[name].astype(np.int16), this[name].astype(np.int16)
        if a.shape != b.shape:
            lines.append(f"| {name} | no | – | – | – | – |")
            continue
        diff = np.abs(a - b)
        mse = float(np.mean(diff.astype(np.float64) ** 2))
        psnr = "∞" if mse == 0 else f"{10 * np.log10(255 ** 2 / mse):.1f} dB"
        lines.append(f"| {name} | yes | {diff.mean():.4f} | {psnr} | {diff.max()} | "
                     f"{np.mean(diff.max(-1) > 0) * 100:.3f} % |")
    lines += ["", clip_row]
    print(write_section(args.section, "\n".join(lines)).read_text())


if __name__ == "__main__":
    main()
