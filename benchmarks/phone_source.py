"""A fusion's source decoded at reduced scale (issue 19): what it saves and whether its fusions change.

A phone's photo (4000×3000, 12 MP) is the usual source of a fusion app, and its face is far larger than any render
crop. The decode stage decodes such a JPEG at ½–⅛ scale (libjpeg's DCT scaling; the longer side kept at least the
analysis copy's 1920 px) and the detect stage decodes it again in full when the chosen face would keep fewer than
``SOURCE_DETAIL`` × the pixels the largest render crop gives a face (:mod:`facefuse.stages.detect`).

No shared photo is that large, so each source here is a shared photo scaled up to a 4000 px longer side
(tests/phone_photos.py: Lanczos, JPEG quality 92; smoother than a real phone photo). Each is a
source onto six targets, decoded as the code does and in full (the reduction off), both in one process with the
analysis cache off. Per source: the scale it was decoded at, the source's slice (decode … segment) in CPU ms, the
independent judge's (MobileFaceNet) cosine of the output face to the original photo's face, and the PSNR of the
two outputs over the target face's box. The group photo's faces are small: it must fall back to the full decode.
Writes benchmarks/results/phone_source.md and artifacts/phone_source.png (per source, the outputs of the full
decode above those of the reduced one).
"""

from __future__ import annotations

import contextlib
import time

import cv2
import numpy as np
from common import ARTIFACTS, FACES, machine, median, replaced, write_section
from phone_photos import PHONE_SIDE, phone_jpeg

from facefuse.config import StoreConfig
from facefuse.fusion.engine import FusionOptions
from facefuse.imageio import decode_image
from facefuse.pipeline import Fuser, FuserConfig
from facefuse.stages import decode
from facefuse_eval.fusion import IdentityJudge

SOURCES = ["hard/same-person/elon_musk/01_event_smiling_blue_backdrop.jpg",
           "facenet-pytorch/test_images/shea_whigham/1.jpg", "face_recognition/biden.jpg",
           "face_recognition/knn_examples/train/rose_leslie/img1.jpg",
           "face_recognition/knn_examples/test/obama_and_biden.jpg"]  # the last: a group photo, small faces
TARGETS = ["face_recognition/obama-720p.jpg", "hard/makeup/01_blue_smoky_eyes_red_lipstick.png",
           "hard/glasses/05_thick_dark_frames.jpg", "hard/sidelight/01_lowkey_studio_woman.jpg",
           "face_recognition/obama-1080p.jpg", "hard/beard/03_full_black_beard.jpg"]


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return 99.0 if mse == 0 else 10 * np.log10(255 ** 2 / mse)


def main() -> None:
    header = machine()
    fuser = Fuser(FuserConfig(store=StoreConfig.from_env(), analysis_cache_mb=0))
    judge = IdentityJudge(fuser.store, fuser.runtime)
    options = FusionOptions(visible_label=False)
    targets = {t: (FACES / t).read_bytes() for t in TARGETS}
    rows, sheet = [], []
    for source, kind in [(s, "JPEG") for s in SOURCES] + [(SOURCES[0], "RGB array")]:
        data = phone_jpeg(FACES / source)
        if kind == "RGB array":  # a library caller's photo, decoded already: halved after, not decoded at ½
            data = decode_image(data).pixels
        original = fuser.analyze(FACES / source)
        reference = judge.embed(original.image, max(original.faces, key=lambda f: f.area))
        ways = {"reduced": contextlib.nullcontext, "full": lambda: replaced(decode, "ANALYSIS_MAX_SIDE", 10 ** 9)}
        cells, outputs = {}, {}
        for way, switch in ways.items():
            prepare_ms, cosines, tiles, reductions = [], [], [], set()
            for target, target_bytes in targets.items():
                with switch():  # the full way: no reduction leaves the analysis copy's size
                    start = time.process_time()
                    prepared = fuser.prepare(data, options)
                    prepare_ms.append((time.process_time() - start) * 1000)
                    result = fuser.fuse_prepared(prepared, target_bytes, options)
                reductions.add(round(PHONE_SIDE / max(prepared.analysis.image.shape[:2])))
                target_face = fuser.analyze(target_bytes).faces[result.faces[0]["index"]]
                found = fuser.analyzer.analyze(result.image)
                out_face = min(found.faces, key=lambda f: np.abs(f.box - target_face.box).sum())
                cosines.append(float(judge.embed(result.image, out_face) @ reference))
                x0, y0, w, h = (int(v) for v in target_face.box)
                tiles.append(result.image[y0:y0 + h, x0:x0 + w])
            cells[way] = (median(prepare_ms), float(np.mean(cosines)), sorted(reductions))
            outputs[way] = tiles
        face_psnr = median([psnr(a, b) for a, b in zip(outputs["reduced"], outputs["full"])])
        worst_psnr = min(psnr(a, b) for a, b in zip(outputs["reduced"], outputs["full"]))
        if kind == "JPEG":
            sheet.append(np.vstack([np.hstack([cv2.resize(t, (160, 160), interpolation=cv2.INTER_AREA)
                                               for t in outputs[way]]) for way in ("full", "reduced")]))
        (r_ms, r_cos, r_scale), (f_ms, f_cos, _) = cells["reduced"], cells["full"]
        scale = " / ".join("full" if k == 1 else f"1/{k}" for k in r_scale)
        rows.append(f"| {source} | {kind} | {scale} | {f_ms:.1f} → {r_ms:.1f} | {f_cos:.3f} → {r_cos:.3f} | "
                    f"{face_psnr:.1f} dB (worst {worst_psnr:.1f}) |")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(ARTIFACTS / "phone_source.png"), cv2.cvtColor(np.vstack(sheet), cv2.COLOR_RGB2BGR))
    lines = ["## A fusion's source decoded at reduced scale (`benchmarks/phone_source.py`)", "",
             (f"Machine: {header}. Each source a shared photo scaled up to a {PHONE_SIDE} px longer side (a 12 MP "
              f"phone photo's size), JPEG 92, onto {len(TARGETS)} targets (mesh engine, defaults, analysis cache off), "
              "decoded in full (the reduction off) → as the code does; the first source also as an RGB array (a library "
              "caller's decoded photo: halved by area after, where a JPEG is decoded at ½). Decoded at: the scale the source slice kept "
              "(full: the face needed the full decode). Source CPU ms: the source's slice (decode … segment), "
              "median over the targets; identity: mean MobileFaceNet cosine of the output face to the original "
              "photo's face; PSNR: the two outputs over the target face's box, median over the targets."), "",
             ("| source (scaled to 4000 px) | given as | decoded at | source CPU ms | identity cos to source | "
              "PSNR full vs reduced |"),
             "|---|---|---|---|---|---|", *rows, "",
             "Contact sheet: `artifacts/phone_source.png` (per source, the full decode's outputs above the reduced one's)."]
    write_section("phone_source", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
