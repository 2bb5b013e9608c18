"""Does analysing a photo a little larger than ANALYSIS_MAX_SIDE as it is (no reduced copy) change its fusions?
A speed idea tried in issue 19 and dropped on this measurement: the copy of a 970×2204 portrait cost about half of
its detect stage.

Every shared photo whose longer side lies between 1920 and 3840 px is a source onto six targets, with the analysis
copy made as the code does (any photo above 1920 px) and as tried (only photos at least twice that); both in one
process, the analysis cache off. Per source: the decode … gate CPU time, the independent judge's (MobileFaceNet)
cosine of the output face to the source photo's face, and the blotch share of the light metric
(facefuse_eval.lighting). Then the 720p portrait clip of benchmarks/video.py (30 frames) fused from biden.jpg both
ways, with its mean identity per frame. Writes benchmarks/results/analysis_copy.md and a contact sheet of the first
source's outputs, copy above no copy, under artifacts/.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
from common import ARTIFACTS, FACES, machine, median, write_section
from video import SOURCE as CLIP_SOURCE
from video import identity, portrait_clip, rgb_frames

from facefuse.analysis import analyzer
from facefuse.config import StoreConfig
from facefuse.fusion.engine import FusionOptions
from facefuse.pipeline import Fuser, FuserConfig
from facefuse.video import fuse_video
from facefuse_eval.fusion import IdentityJudge
from facefuse_eval.lighting import lighting_error

SOURCES = ["face_recognition/biden.jpg", "facenet-pytorch/test_images/shea_whigham/1.jpg",
           "facenet-pytorch/test_images/paul_rudd/1.jpg", "facenet-pytorch/test_images/angelina_jolie/1.jpg"]
TARGETS = ["face_recognition/obama-720p.jpg", "hard/makeup/01_blue_smoky_eyes_red_lipstick.png",
           "hard/glasses/05_thick_dark_frames.jpg", "hard/sidelight/01_lowkey_studio_woman.jpg",
           "face_recognition/obama-1080p.jpg", "hard/beard/03_full_black_beard.jpg"]
COPY = analyzer.analysis_copy


def copy_from_twice(image: np.ndarray, max_side: int = analyzer.ANALYSIS_MAX_SIDE) -> tuple[np.ndarray, float]:
    """The rule tried: a photo less than twice ``max_side`` is analysed as it is."""
    return (image, 1.0) if max(image.shape[:2]) < 2 * max_side else COPY(image, max_side)


RULES: dict[str, Callable[..., tuple[np.ndarray, float]]] = {"copy above 1920 px (the code)": COPY,
                                                             "copy from 3840 px (tried)": copy_from_twice}


def main() -> None:
    header = machine()
    fuser = Fuser(FuserConfig(store=StoreConfig.from_env(), analysis_cache_mb=0))
    judge = IdentityJudge(fuser.store, fuser.runtime)
    options = FusionOptions()
    rows, sheet = [], []
    for source in SOURCES:
        source_bytes = (FACES / source).read_bytes()
        cells = {}
        for label, rule in RULES.items():
            analyzer.analysis_copy = rule
            src = fuser.analyze(source_bytes)
            src_face = max(src.faces, key=lambda f: f.area)
            reference = judge.embed(src.image, src_face)
            detect, cosines, blotches, outputs = [], [], [], []
            for target in TARGETS:
                target_bytes = (FACES / target).read_bytes()
                start = time.process_time()
                fuser.detect(source_bytes)
                detect.append((time.process_time() - start) * 1000)
                result = fuser.fuse(source_bytes, target_bytes, options)
                tgt = fuser.analyze(target_bytes)
                face = tgt.faces[result.faces[0]["index"]]
                out = fuser.analyzer.analyze(result.image)
                out_face = min(out.faces, key=lambda f: np.abs(f.box - face.box).sum())
                cosines.append(float(judge.embed(result.image, out_face) @ reference))
                blotches.append(lighting_error(result.image, tgt.image, face).blotch_share * 100)
                x0, y0, w, h = (int(v) for v in face.box)
                pad = w // 3
                tile = result.image[max(0, y0 - pad):y0 + h + pad, max(0, x0 - pad):x0 + w + pad]
                outputs.append(cv2.resize(tile, (200, 200), interpolation=cv2.INTER_AREA))
            cells[label] = (median(detect), float(np.mean(cosines)), float(np.mean(blotches)))
            if source == SOURCES[0]:
                sheet.append(np.hstack(outputs))
        analyzer.analysis_copy = COPY
        (b_ms, b_cos, b_bl), (n_ms, n_cos, n_bl) = cells.values()
        rows.append(f"| {source} | {b_ms:.1f} → {n_ms:.1f} | {b_cos:.3f} → {n_cos:.3f} | {b_bl:.2f} → {n_bl:.2f} % |")
    clip_identity = []
    with tempfile.TemporaryDirectory() as tmp:
        clip = Path(tmp) / "720p.mp4"
        portrait_clip(clip, (1280, 720), 30)
        frames = rgb_frames(clip)
        for rule in RULES.values():
            analyzer.analysis_copy = rule
            out = Path(tmp) / "out.mp4"
            fuse_video(CLIP_SOURCE, clip, out, FusionOptions(visible_label=False), fuser=fuser)
            clip_identity.append(identity(fuser, judge, frames, rgb_frames(out))[0])
        analyzer.analysis_copy = COPY
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(ARTIFACTS / "analysis_copy_biden.png"), cv2.cvtColor(np.vstack(sheet), cv2.COLOR_RGB2BGR))
    lines = ["## Analysis copy of slightly large photos (`benchmarks/analysis_copy.py`)", "",
             (f"Machine: {header}. Each source onto {len(TARGETS)} targets (mesh engine, defaults, analysis cache off), "
              "the reduced analysis copy made for every photo above 1920 px (the code) or only from 3840 px (tried). "
              "Detect: CPU ms of the source's decode … gate (median); identity: mean MobileFaceNet cosine of the "
              "output face to the source's; blotch: mean blotch share of the light metric."), "",
             "| source (longer side 1920–3840 px) | detect CPU ms | identity cos to source | blotch share |",
             "|---|---|---|---|", *rows, "",
             ("The 720p portrait clip (30 frames, biden.jpg as the source, benchmarks/video.py's): mean identity cos "
              f"to the source per frame {clip_identity[0]:.3f} → {clip_identity[1]:.3f}"
              f"{' (lower without the copy)' if clip_identity[1] < clip_identity[0] else ''}.")]
    write_section("analysis_copy", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
