"""Naturalness of fusions (issue 8): the target's lighting kept, occluders kept, no hair leak, pose kept, side faces.

- Lighting: self-swaps (source = another photo of the target's own person: the output should reproduce the target)
  and cross-person pairs, scored by :mod:`facefuse_eval.lighting` (low-pass Lab inside the target's face hull:
  blotch share, mean |ΔL|, chroma), with the trained segmenter and with the classic masks.
- Identity top-1 at the default degrees (MobileFaceNet, an independent judge) on the same sets.
- Pose kept, per axis, by an independent judge: YuNet's five points + solvePnP (:mod:`facefuse_eval.pose_judge`).
- Occluder preservation: a known synthetic occluder pasted onto the target must come out unchanged (PSNR inside it).
- Hair leak: share of the target's forehead whose colour moved toward the source's hair colour.
- Side faces: identity and blotch share by yaw bin of the target and of the source.
Contact sheets go to artifacts/ (not committed: photo licences). Writes benchmarks/results/naturalness.md.
"""

from __future__ import annotations

import argparse
import itertools
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
from common import ARTIFACTS, FACES, machine, median, write_section

from facefuse.errors import FacefuseError
from facefuse.fusion.engine import FusionOptions
from facefuse_eval.fusion import IdentityJudge
from facefuse.geometry.regions import FACE_OVAL, LEFT_BROW, RIGHT_BROW
from facefuse.pipeline import Fuser
from facefuse_eval.lighting import lighting_error
from facefuse_eval.pose_judge import PoseJudge

FACE_API = FACES / "face-api-js"
KNN = FACES / "face_recognition" / "knn_examples" / "train"
YAW_BINS = ((0, 15), (15, 30), (30, 45), (45, 60))


def people_sets(quick: bool) -> dict[str, dict[str, list[Path]]]:
    """Sets with several photos per person: {set: {person: [photos]}}."""
    face_api = {p.name: sorted(p.glob("*.png")) for p in sorted(FACE_API.iterdir()) if p.is_dir()}
    knn = {p.name: sorted(p.iterdir()) for p in sorted(KNN.iterdir()) if len(list(p.iterdir())) > 1}
    att = {f"s{i}": [FACES / f"att-faces/s{i}/{k}.pgm" for k in (1, 2, 3)] for i in range(1, 11)}
    if quick:
        return {"face-api-js": dict(list(face_api.items())[:3])}
    return {"face-api-js": face_api, "knn_examples": knn, "att-faces": att}


@dataclass
class Tally:
    blotch: list[float] = field(default_factory=list)
    mean_dl: list[float] = field(default_factory=list)
    mean_dc: list[float] = field(default_factory=list)
    top1: list[bool] = field(default_factory=list)
    pose: list[np.ndarray] = field(default_factory=list)
    segment_ms: list[float] = field(default_factory=list)
    rejected: int = 0

    def row(self, label: str) -> str:
        b = np.array(self.blotch) * 100
        pose = np.mean(self.pose, axis=0) if self.pose else np.full(3, np.nan)
        identity = f"{100 * np.mean(self.top1):.1f} %" if self.top1 else "–"
        return (f"| {label} | {len(b)} | {b.mean():.2f} % | {np.quantile(b, 0.9):.2f} % | {np.mean(self.mean_dl):.2f} | "
                f"{np.mean(self.mean_dc):.2f} | {identity} | {pose[0]:.2f}° / {pose[1]:.2f}° / {pose[2]:.2f}° | "
                f"{median(self.segment_ms):.1f} | {self.rejected} |")


class Bench:
    def __init__(self) -> None:
        self.fuser = Fuser()
        self.judge = IdentityJudge(self.fuser.store, self.fuser.runtime)
        self.pose_judge = PoseJudge()

    def embed(self, photo: Path) -> np.ndarray:
        analysis = self.fuser.analyze(photo)
        return self.judge.embed(analysis.image, max(analysis.faces, key=lambda f: f.area))

    def fuse(self, source: Path, target: Path, options: FusionOptions, tally: Tally,
             gallery: tuple[list[str], np.ndarray] | None = None, source_name: str = ""):
        try:
            result = self.fuser.fuse(source, target, options)
        except FacefuseError:
            tally.rejected += 1
            return None
        analysis = self.fuser.analyze(target)
        face = analysis.faces[result.faces[0]["index"]]
        error = lighting_error(result.image, analysis.image, face)
        tally.blotch.append(error.blotch_share)
        tally.mean_dl.append(error.mean_dl)
        tally.mean_dc.append(error.mean_dc)
        tally.segment_ms.append(result.timings_ms.get("segment", 0.0))
        rect = self.pose_judge.face_rect(analysis.image, face.box)
        before, after = self.pose_judge.pose(analysis.image, rect), self.pose_judge.pose(result.image, rect)
        if before is not None and after is not None:
            delta = np.array([after.yaw - before.yaw, after.pitch - before.pitch, after.roll - before.roll])
            tally.pose.append(np.abs((delta + 180.0) % 360.0 - 180.0))
        if gallery is not None:
            names, embeddings = gallery
            out = self.fuser.analyzer.analyze(result.image)
            if out.faces:
                out_face = min(out.faces, key=lambda f: np.abs(f.box - face.box).sum())
                scores = embeddings @ self.judge.embed(result.image, out_face)
                tally.top1.append(names[int(np.argmax(scores))] == source_name)
        return result, analysis, face


def sheet_tile(image: np.ndarray, box: np.ndarray, size: int = 180) -> np.ndarray:
    x, y, w, h = box
    side = int(max(w, h) * 1.6)
    cx, cy = int(x + w / 2), int(y + h / 2)
    padded = cv2.copyMakeBorder(image, side, side, side, side, cv2.BORDER_CONSTANT)
    return cv2.resize(padded[cy + side - side // 2: cy + side + side // 2, cx + side - side // 2: cx + side + side // 2],
                      (size, size), interpolation=cv2.INTER_AREA)


def save_sheet(name: str, rows: list[np.ndarray]) -> None:
    if rows:
        ARTIFACTS.mkdir(exist_ok=True)
        cv2.imwrite(str(ARTIFACTS / f"{name}.png"), cv2.cvtColor(np.vstack(rows), cv2.COLOR_RGB2BGR))


def lighting_rows(bench: Bench, sets: dict[str, dict[str, list[Path]]], quick: bool) -> list[str]:
    rows: list[str] = []
    for mode in ("auto", "off"):
        options = FusionOptions(visible_label=False, segmentation=mode)
        for set_name, people in sets.items():
            names = list(people)
            gallery = (names, np.stack([bench.embed(people[n][-1]) for n in names]))
            own, cross = Tally(), Tally()
            sheet: list[np.ndarray] = []
            for person, photos in people.items():
                for source, target in itertools.permutations(photos[:-1] if len(photos) > 2 else photos, 2):
                    done = bench.fuse(source, target, options, own)
                    if done and mode == "auto" and len(sheet) < 10:
                        src = bench.fuser.analyze(source)
                        sheet.append(np.hstack([sheet_tile(src.image, max(src.faces, key=lambda f: f.area).box),
                                                sheet_tile(done[1].image, done[2].box),
                                                sheet_tile(done[0].image, done[2].box)]))
                for other in names if not quick else names[:2]:
                    if other != person:
                        bench.fuse(people[other][0], photos[0], options, cross, gallery, other)
            rows.append(own.row(f"{set_name}, self-swap, segmentation={mode}"))
            rows.append(cross.row(f"{set_name}, cross-person, segmentation={mode}"))
            if mode == "auto":
                save_sheet(f"naturalness_self_{set_name}", sheet)
    return rows


def paste_occluder(image: np.ndarray, face) -> tuple[np.ndarray, np.ndarray]:
    """The target with a dark glasses frame and a hand-coloured bar across the cheek; and the occluder's mask."""
    mesh = face.landmarks
    width = float(np.ptp(mesh[FACE_OVAL, 0]))
    out = image.copy()
    mask = np.zeros(image.shape[:2], np.uint8)
    thickness = max(2, int(width * 0.03))
    for eye in (33, 263):
        other = 133 if eye == 33 else 362
        centre = ((mesh[eye, :2] + mesh[other, :2]) / 2).astype(int)
        axes = (int(width * 0.17), int(width * 0.12))
        cv2.ellipse(mask, tuple(centre), axes, 0, 0, 360, 1, thickness)
    cv2.line(mask, tuple(mesh[133, :2].astype(int)), tuple(mesh[362, :2].astype(int)), 1, thickness)
    out[mask > 0] = (30, 25, 20)
    bar = np.zeros_like(mask)
    p0 = mesh[187, :2].astype(int)
    cv2.line(bar, tuple(p0 + [0, int(width * 0.12)]), tuple(p0 + [int(width * 0.25), int(width * 0.12)]), 1,
             max(3, int(width * 0.08)))
    out[bar > 0] = (214, 160, 130)
    return out, np.maximum(mask, bar) > 0


def occluder_rows(bench: Bench, sets: dict[str, dict[str, list[Path]]]) -> tuple[list[str], list[np.ndarray]]:
    rows, sheet = [], []
    photos = [ps[0] for people in sets.values() for ps in list(people.values())[:4]]
    for mode in ("auto", "off"):
        psnrs = []
        for source, target in zip(photos, photos[1:] + photos[:1]):
            analysis = bench.fuser.analyze(target)
            face = max(analysis.faces, key=lambda f: f.area)
            occluded, mask = paste_occluder(analysis.image, face)
            try:
                result = bench.fuser.fuse(source, occluded, FusionOptions(visible_label=False, segmentation=mode))
            except FacefuseError:
                continue
            diff = result.image[mask].astype(np.float64) - occluded[mask].astype(np.float64)
            mse = float(np.mean(diff ** 2))
            psnrs.append(99.0 if mse == 0 else 10 * np.log10(255 ** 2 / mse))
            if mode == "auto" and len(sheet) < 6:
                sheet.append(np.hstack([sheet_tile(occluded, face.box), sheet_tile(result.image, face.box)]))
        rows.append(f"| segmentation={mode} | {len(psnrs)} | {median(psnrs):.1f} dB | {min(psnrs):.1f} dB |")
    return rows, sheet


def forehead(face, shape) -> np.ndarray:
    mesh = face.landmarks
    brows = np.concatenate([mesh[RIGHT_BROW, :2], mesh[LEFT_BROW, :2]])
    top = mesh[FACE_OVAL][mesh[FACE_OVAL, 1] < brows[:, 1].min(), :2]
    polygon = np.concatenate([top, brows[np.argsort(-brows[:, 0])]]) if len(top) else brows
    mask = np.zeros(shape[:2], np.uint8)
    cv2.fillPoly(mask, [cv2.convexHull(polygon.astype(np.int32))], 1)
    return mask > 0


def hair_band(face, shape) -> np.ndarray:
    """A band just above the top of the face oval (15 % of the face height): hair on everyone but the bald."""
    top = face.landmarks[FACE_OVAL][face.landmarks[FACE_OVAL, 1] < face.landmarks[FACE_OVAL, 1].min()
                                     + 0.2 * np.ptp(face.landmarks[FACE_OVAL, 1]), :2]
    lift = 0.15 * float(np.ptp(face.landmarks[FACE_OVAL, 1]))
    polygon = np.concatenate([top, top[::-1] - [0, lift]])
    mask = np.zeros(shape[:2], np.uint8)
    cv2.fillPoly(mask, [cv2.convexHull(polygon.astype(np.int32))], 1)
    return mask > 0


def hair_leak_rows(bench: Bench, sources: list[Path], targets: list[Path]) -> list[str]:
    """Share of the target's forehead that moved ≥ 10 Lab units toward the source's hair colour (sampled in a band
    above the source's face oval)."""
    rows = []
    for mode in ("auto", "off"):
        shares = []
        for source in sources:
            src = bench.fuser.analyze(source)
            sface = max(src.faces, key=lambda f: f.area)
            lab_s = cv2.cvtColor(src.image, cv2.COLOR_RGB2Lab).astype(np.float32)
            band = hair_band(sface, src.image.shape)
            hair = np.median(lab_s[band], axis=0) if band.any() else None
            for target in targets:
                if hair is None or target == source:
                    continue
                try:
                    result = bench.fuser.fuse(source, target, FusionOptions(visible_label=False, segmentation=mode))
                except FacefuseError:
                    continue
                tgt = bench.fuser.analyze(target)
                region = forehead(tgt.faces[result.faces[0]["index"]], tgt.image.shape)
                lab_t = cv2.cvtColor(tgt.image, cv2.COLOR_RGB2Lab).astype(np.float32)[region]
                lab_o = cv2.cvtColor(result.image, cv2.COLOR_RGB2Lab).astype(np.float32)[region]
                toward = np.linalg.norm(lab_t - hair, axis=1) - np.linalg.norm(lab_o - hair, axis=1)
                shares.append(float((toward > 10).mean()))
        rows.append(f"| segmentation={mode} | {len(shares)} | {100 * np.mean(shares):.2f} % | "
                    f"{100 * np.quantile(shares, 0.9):.2f} % |")
    return rows


def yaw_rows(bench: Bench) -> list[str]:
    """Every face of the colour sets as target and as source against a fixed frontal partner, binned by yaw."""
    photos = sorted(FACE_API.glob("*/*.png")) + sorted(KNN.glob("*/*")) + sorted((FACES / "dlib-faces").glob("*.jpg"))
    frontal = FACES / "face_recognition" / "obama.jpg"
    bins = {(role, b): Tally() for role in ("target", "source") for b in YAW_BINS}
    sheet: dict[tuple[int, int], np.ndarray] = {}
    for photo in photos:
        try:
            analysis = bench.fuser.analyze(photo)
        except FacefuseError:
            continue
        for index, face in enumerate(analysis.faces):
            if face.pose is None or face.box[2] < 60:
                continue
            yaw = abs(face.pose.yaw)
            span = next((b for b in YAW_BINS if b[0] <= yaw < b[1]), None)
            if span is None:
                continue
            as_target = bench.fuse(frontal, photo, FusionOptions(visible_label=False, target_face=index),
                                   bins[("target", span)])
            bench.fuse(photo, frontal, FusionOptions(visible_label=False, source_face=index), bins[("source", span)])
            if as_target and span not in sheet:
                sheet[span] = np.hstack([sheet_tile(analysis.image, face.box), sheet_tile(as_target[0].image, face.box)])
    save_sheet("naturalness_yaw", [sheet[b] for b in YAW_BINS if b in sheet])
    return [f"| {role} | {b[0]}–{b[1]}° | {len(t.blotch)} | "
            f"{(100 * np.mean(t.blotch)) if t.blotch else float('nan'):.2f} % | {t.rejected} |"
            for (role, b), t in bins.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="3 people of one set, for checking the script")
    args = parser.parse_args()
    bench = Bench()
    sets = people_sets(args.quick)
    lighting = lighting_rows(bench, sets, args.quick)
    occluder, occluder_sheet = occluder_rows(bench, sets)
    save_sheet("naturalness_occluders", occluder_sheet)
    long_hair = [FACE_API / f"{p}/{p}{i}.png" for p in ("penny", "bernadette", "amy") for i in (1, 2)]
    targets = [FACE_API / f"{p}/{p}1.png" for p in ("howard", "leonard", "raj", "sheldon")]
    hair = hair_leak_rows(bench, long_hair[:2] if args.quick else long_hair, targets[:2] if args.quick else targets)
    yaw = [] if args.quick else yaw_rows(bench)
    lines = [
        "## Naturalness (`benchmarks/naturalness.py`)",
        "",
        f"Machine: {machine()} (shared with other work while measured). Engine: mesh, default degrees.",
        "Lighting is scored inside the target's face hull (eroded 5 % of the face width) on low-pass Lab (σ = 8 % of",
        "the face width) after removing the region's median difference: blotch share = pixels with |ΔL| > 8.",
        "Identity: MobileFaceNet top-1 against one reference photo per person (the person's last photo, never fused).",
        "Pose error: |Δ| yaw / pitch / roll of output vs target by dlib's 68 points + solvePnP (independent of FaceMesh).",
        "",
        "| set, pairs | fused | blotch share mean | blotch share worst decile (p90) | mean |ΔL| | mean chroma |Δ| | "
        "identity top-1 | pose error yaw / pitch / roll | segment stage ms (median) | rejected |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *lighting,
        "",
        "Goals: blotch share ≤ 3 % mean and ≤ 10 % worst decile, mean |ΔL| ≤ 2.0, identity top-1 ≥ 90 %, pose error",
        "≤ 2.5° per axis. face-api-js stills are greyscale, so their chroma is 0 by construction.",
        "",
        "### Occluder preservation (a dark glasses frame and a skin-coloured bar pasted onto the target)",
        "",
        "| masks | pairs | PSNR inside the occluder (median) | worst |",
        "|---|---|---|---|",
        *occluder,
        "",
        "Goal: ≥ 35 dB. Contact sheet: `artifacts/naturalness_occluders.png`.",
        "",
        "### Hair leak (long-haired sources with a fringe onto short-haired targets)",
        "",
        "| masks | pairs | forehead share moved ≥ 10 Lab units toward the source's hair colour (mean) | p90 |",
        "|---|---|---|---|",
        *hair,
    ]
    if yaw:
        lines += ["", "### Side faces by yaw bin (every face of the colour sets, fused with a frontal partner)", "",
                  "| role of the turned face | |yaw| | fused | blotch share mean | rejected |", "|---|---|---|---|---|",
                  *yaw, "", "Contact sheet: `artifacts/naturalness_yaw.png` (one face per bin: target | output)."]
    print(write_section("naturalness", "\n".join(lines)).read_text())


if __name__ == "__main__":
    main()
