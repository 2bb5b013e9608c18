"""Occluders and the segmenter. Part ``pairs``: why occluders come back below the goal: the occluder pairs of ``naturalness.py`` (a dark glasses frame and a
skin-coloured bar pasted onto the target) split into their two parts, with the PSNR inside each and how much of each
the segment stage's ``target_keep`` mask covers (mean weight, and the share of pixels kept whole: a pixel kept at
0.9 still takes a tenth of the new face, ~12 levels on a dark frame). Writes benchmarks/results/occluder_masks.md.
Part ``segmenter``: the segmenter alone on real photos, for one or more ONNX files (``--models name=path,...``;
default the package's): occluder pixels on occluder-free faces (beards, side light, make-up: false occluders that keep
the target's beard or shadow on the new face) and how much of real glasses frames it keeps. Writes
benchmarks/results/segmenter_occluders.md; contact sheets in artifacts/.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
from common import ARTIFACTS, machine, median, write_section
from naturalness import HARD, Bench, paste_occluder, photo_sets

from facefuse.analysis.segmentation import BROWS, EYES, NOSE, OCCLUDER, SEGMENT_SIZE, SKIN, SEGMENTER_MODEL, FaceSegmenter
from facefuse.errors import FacefuseError
from facefuse.fusion.occlusion import OCCLUDER_FLOOR, OCCLUDER_RULES, occluders
from facefuse.geometry import align
from facefuse.geometry.regions import FACE_OVAL
from facefuse.pipeline import Fuser
from facefuse.fusion.engine import FusionOptions
from facefuse.stages.base import Stage
from facefuse.stages.record import Record

BAR_COLOUR = (214, 160, 130)  # paste_occluder's bar
UNSEEN_COLOUR = (172, 118, 92)  # paste_unseen's bent stick: a darker skin tone than the bar


def paste_unseen(image: np.ndarray, face) -> tuple[np.ndarray, np.ndarray]:
    """A held-out occluder, a shape the segmenter's training never draws: a stick bent in the middle (a crooked
    twig, a bent finger) on the *other* cheek, down and across at two angles, in a darker skin tone, with
    anti-aliased edges; and its mask (the pixels at least half covered). The training's rods and stubs are straight;
    this checks that what it learnt is "a thing on the face", not the benchmark's bar."""
    mesh = face.landmarks
    width = float(np.ptp(mesh[FACE_OVAL, 0]))
    start = mesh[411, :2] + [-0.02 * width, -0.04 * width]
    knee = start + [0.10 * width, 0.09 * width]
    end = knee + [-0.05 * width, 0.13 * width]
    coverage = np.zeros(image.shape[:2], np.uint8)
    points = (np.array([start, knee, end]) * 16).astype(np.int32)  # 4 fractional bits
    cv2.polylines(coverage, [points], False, 255, max(3, int(width * 0.06)), cv2.LINE_AA, shift=4)
    alpha = coverage[..., None].astype(np.float32) / 255.0
    out = (image * (1 - alpha) + np.array(UNSEEN_COLOUR, np.float32) * alpha + 0.5).astype(np.uint8)
    return out, coverage >= 128


@dataclass(frozen=True, eq=False)
class Keep(Stage):
    """Records each face's segment-stage masks and crop matrix as the list runs (the record is passed on as is)."""

    name = "keep_masks"
    per_face = True
    seen: list

    def __call__(self, record: Record) -> Record:
        self.seen.append(record)
        return record


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return 99.0 if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def fused_with_keep(fuser, source: Path, occluded: np.ndarray, seen: list[Record], segmentation: str):
    """The fusion of ``source`` onto ``occluded`` and the segment stage's ``target_keep`` warped back onto the photo
    (None when the fusion fails); and the rendered crop's side."""
    seen.clear()
    try:
        out = fuser.fuse(source, occluded, FusionOptions(visible_label=False, segmentation=segmentation)).image
    except FacefuseError:
        return None
    record = seen[-1]
    height, width = occluded.shape[:2]
    keep = cv2.warpAffine(record.masks.target_keep, cv2.invertAffineTransform(record.rendered.matrix),
                          (width, height), flags=cv2.INTER_LINEAR)
    return out, keep, record.rendered.crop.shape[0]


def pair_figures(fuser, photos: list[Path], seen: list[Record],
                 segmentation: str = "auto") -> tuple[list[str], list[tuple[float, ...]]]:
    """Each occluder pair's row and its figures (PSNR all / frame / bar, keep frame mean / whole, bar mean / whole,
    the segmenter's occluder probability over the bar at 128 px, median)."""
    rows, figures = [], []
    for source, target in zip(photos, photos[1:] + photos[:1]):
        analysis = fuser.analyze(target)
        face = max(analysis.faces, key=lambda f: f.area)
        occluded, mask = paste_occluder(analysis.image, face)
        bar = mask & np.all(occluded == BAR_COLOUR, axis=-1)
        frame = mask & ~bar
        fused = fused_with_keep(fuser, source, occluded, seen, segmentation)
        if fused is None:
            continue
        out, keep, crop_px = fused
        parsing = fuser.segmenter().parse(occluded, [face])[0]
        bar_in_crop = cv2.warpAffine(bar.astype(np.float32), parsing.matrix, (SEGMENT_SIZE, SEGMENT_SIZE)) > 0.5
        values = (psnr(out[mask], occluded[mask]), psnr(out[frame], occluded[frame]), psnr(out[bar], occluded[bar]),
                  keep[frame].mean(), (keep[frame] > 0.99).mean(), keep[bar].mean(), (keep[bar] > 0.99).mean(),
                  float(np.median(parsing.probabilities[OCCLUDER][bar_in_crop])))
        figures.append(values)
        rows.append(f"| {target.parent.name}/{target.name} | {crop_px} | "
                    + " | ".join(f"{v:.1f} dB" for v in values[:3]) + " | "
                    + " | ".join(f"{v:.2f}" for v in values[3:]) + " |")
    return rows, figures


def unseen_row(label: str, fuser, photos: list[Path], seen: list[Record], segmentation: str = "auto") -> str:
    """The held-out bent stick (:func:`paste_unseen`) on the same targets: PSNR inside it (median, worst), the
    keep mask's mean over it and the share kept whole."""
    figures = []
    for source, target in zip(photos, photos[1:] + photos[:1]):
        analysis = fuser.analyze(target)
        occluded, mask = paste_unseen(analysis.image, max(analysis.faces, key=lambda f: f.area))
        fused = fused_with_keep(fuser, source, occluded, seen, segmentation)
        if fused is not None:
            out, keep, _ = fused
            figures.append((psnr(out[mask], occluded[mask]), keep[mask].mean(), (keep[mask] > 0.99).mean()))
    psnrs = [f[0] for f in figures]
    return (f"| {label} | {len(figures)} | {median(psnrs):.1f} dB | {min(psnrs):.1f} dB | "
            f"{median([f[1] for f in figures]):.2f} | {median([f[2] for f in figures]):.2f} |")


def median_row(label: str, figures: list[tuple[float, ...]]) -> str:
    medians = [median([f[i] for f in figures]) for i in range(len(figures[0]))]
    return (f"| **median{label}** ({len(figures)} pairs) | | " + " | ".join(f"{v:.1f} dB" for v in medians[:3])
            + " | " + " | ".join(f"{v:.2f}" for v in medians[3:]) + " |")


def pairs_section(others: dict[str, Path]) -> None:
    """The package's segmenter pair by pair; each of ``others`` (ONNX files swapped into the loaded segmenter)
    as one more median row."""
    bench = Bench()
    seen: list[Record] = []
    fuser = bench.fuser.with_stage(Keep(seen), after="segment")
    sets = photo_sets(["face-api-js", "knn_examples", "att-faces", "hard"])
    photos = [ps[0] for photo_set in sets.values() for ps in list(photo_set.people.values())[:4]]
    rows, figures = pair_figures(fuser, photos, seen)
    unseen = [unseen_row("package's segmenter", fuser, photos, seen),
              unseen_row("package's segmenter, segmentation=whole", fuser, photos, seen, "whole")]
    # the option's other choice: the occluder regions the segmenter is sure of kept whole, grown 1/48
    whole = pair_figures(fuser, photos, seen, "whole")[1]
    extra = [median_row(", segmentation=whole (regions it is sure of kept whole, grown 1/48)", whole)]
    verdict = [f"Goal ≥ 35 dB over the whole pasted occluder: the default (auto) "
               f"{median([f[0] for f in figures]):.1f} dB, segmentation=whole {median([f[0] for f in whole]):.1f} dB "
               "— missed both ways (the bar is not found). What whole costs in identity: \"Identity ablation, "
               "occluder masks: segmentation=whole\"."]
    segmenter = fuser.segmenter()
    for name, path in others.items():
        shipped, segmenter.session = segmenter.session, fuser.runtime.session(path, stage="segment")
        try:
            for segmentation in ("auto", "whole"):
                extra.append(median_row(f", segmenter {name}, segmentation={segmentation}",
                                        pair_figures(fuser, photos, seen, segmentation)[1]))
                unseen.append(unseen_row(f"segmenter {name}, segmentation={segmentation}", fuser, photos, seen,
                                         segmentation))
        finally:
            segmenter.session = shipped
    lines = [
        "## Occluder masks (`benchmarks/occluder_masks.py`)", "",
        f"Machine: {machine()}. Run: `{' '.join(sys.argv[1:]) or 'defaults'}`. The occluder pairs of "
        "`naturalness.py` (segmentation=auto, the default, pair by pair; segmentation=whole as a median row), each "
        "occluder split into the glasses frame and the skin-coloured bar; `keep` is the segment stage's `target_keep` (the target's photo stays on top where it is 1) warped "
        "back onto the photo: its mean over the part, and the share of the part's pixels it keeps whole (> 0.99); "
        "`bar occluder p`: the segmenter's occluder probability over the bar's pixels in its 128 px crop (median).",
        "",
        "| target | crop px | PSNR all | PSNR frame | PSNR bar | keep frame mean | frame kept whole | keep bar mean "
        "| bar kept whole | bar occluder p |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        median_row("", figures),
        *extra,
        "",
        *verdict,
        "",
        "A held-out occluder on the same targets, a shape no training sample draws (the training's rods and stubs "
        "are straight): a stick bent in the middle on the other cheek, 6 % of the face's width thick, in a darker "
        f"skin tone {UNSEEN_COLOUR}, anti-aliased (`paste_unseen`).",
        "",
        "| segmenter | pairs | PSNR inside (median) | worst | keep mean | kept whole |",
        "|---|---|---|---|---|---|",
        *unseen,
    ]
    print(write_section("occluder_masks", "\n".join(lines)).read_text())


# -- the segmenter alone on real photos: false occluders on bare faces, real glasses frames kept ------------------

BARE_HARD = ("beard", "sidelight", "makeup", "profile", "same-person")
# photos of those sets with glasses on (looked at): they count as glasses, not as bare faces
WITH_GLASSES = {"amy/amy4.png", "leonard/leonard1.png", "leonard/leonard4.png", "leonard/leonard5.png",
                *(f"bernadette/bernadette{k}.png" for k in range(1, 6)), *(f"s{i}/{k}.pgm" for i in (4, 6) for k in (1, 2, 3)),
                "profile/04_turned_45_glasses_car.jpg"}
WITH_HANDS = {"yang_mi/02_warm_studio_red_lips_hand.jpg", "yang_mi/04_dark_bg_hand_at_chin.jpg"}


def _key(photo: Path) -> str:
    return f"{photo.parent.name}/{photo.name}"


def bare_photos() -> dict[str, list[Path]]:
    """Occluder-free targets by group: the shared sets' people and faces/hard/'s beard, side-light, make-up,
    profile and same-person photos, minus those with glasses or a hand on the face."""
    groups = {name: [p for ps in photo_set.people.values() for p in ps]
              for name, photo_set in photo_sets(["face-api-js", "knn_examples", "att-faces"]).items()}
    for group in BARE_HARD:
        groups[f"hard/{group}"] = sorted(p for p in (HARD / group).rglob("*")
                                         if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    return {g: [p for p in ps if _key(p) not in WITH_GLASSES | WITH_HANDS] for g, ps in groups.items()}


def glasses_photos() -> list[Path]:
    """hard/glasses and the shared sets' photos with glasses on."""
    every = [p for ps in photo_sets(["face-api-js", "att-faces"]).values() for people in ps.people.values()
             for p in people] + sorted((HARD / "profile").iterdir())
    return sorted((HARD / "glasses").iterdir()) + [p for p in every if _key(p) in WITH_GLASSES]


@dataclass(frozen=True)
class Parsed:
    """One photo's largest face in the segmenter's 128 px crop: pixels, occluder probability, the fused region
    (FaceMesh's face oval, the pixels the new face replaces) and FaceMesh's feature labels."""

    crop: np.ndarray
    occluder: np.ndarray
    region: np.ndarray
    labels: np.ndarray


def parse(fuser: Fuser, segmenter: FaceSegmenter, photo: Path) -> Parsed:
    from facefuse_training.segmenter.labels import face_labels

    analysis = fuser.analyze(photo)
    face = max(analysis.faces, key=lambda f: f.area)
    parsing = segmenter.parse(analysis.image, [face])[0]
    crop = align.aligned_crop(analysis.image, parsing.matrix, SEGMENT_SIZE)
    labels = face_labels(align.apply(parsing.matrix, face.landmarks[:, :2]).astype(np.float32))
    return Parsed(crop, parsing.probabilities[OCCLUDER], labels > 0, labels)


def frame_truth(parsed: Parsed) -> np.ndarray:
    """The glasses' on-face pixels of a real photo, by rule (no hand-drawn masks exist): inside the face oval, in
    the band from the brows to the nose's middle, not an eye or brow of FaceMesh (grown 1 px), and darker than
    0.6 of the cheeks' median lightness — dark frames and sunglass lenses; thin metal frames escape it, so the
    thin-frame photos are reported by their occluder pixels only."""
    lightness = cv2.cvtColor(parsed.crop, cv2.COLOR_RGB2LAB)[..., 0].astype(np.float32)
    rows = np.flatnonzero((parsed.labels == BROWS).any(1) | (parsed.labels == EYES).any(1))
    band = np.zeros_like(parsed.region)
    if rows.size:
        nose_rows = np.flatnonzero((parsed.labels == NOSE).any(1))
        bottom = (rows[-1] + nose_rows[-1]) // 2 if nose_rows.size else rows[-1] + 6
        band[max(rows[0] - 2, 0):bottom + 1] = True
    features = cv2.dilate(np.isin(parsed.labels, (BROWS, EYES)).astype(np.uint8), np.ones((3, 3), np.uint8)) > 0
    cheeks = parsed.region & ~band & (parsed.labels == SKIN)
    dark = lightness < 0.6 * (np.median(lightness[cheeks]) if cheeks.any() else 128.0)
    return parsed.region & band & ~features & dark


def kept(occluder: np.ndarray, segmentation: str = "auto") -> np.ndarray:
    """Where the segment stage keeps the target (≥ 0.5): its occluder mask for the option's choice
    (fusion/occlusion.py ``occluders``), grown as the stage grows it (2 px at 128 px)."""
    rule = OCCLUDER_RULES[segmentation]
    radius = max(1, SEGMENT_SIZE // rule.grow_divisor)
    kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * radius + 1, 2 * radius + 1))
    return cv2.dilate(occluders(occluder, rule.sure), kernel) >= 0.5


def overlay(parsed: Parsed, truth: np.ndarray | None = None) -> np.ndarray:
    """The crop ×2 with the occluder pixels (p > 0.35) in the fused region red, outside it dim red; the rule's
    frame pixels outlined cyan."""
    out = parsed.crop.astype(np.float32)
    hit = parsed.occluder > OCCLUDER_FLOOR
    out[hit & parsed.region] = 0.4 * out[hit & parsed.region] + [150, 0, 0]
    out[hit & ~parsed.region] = 0.7 * out[hit & ~parsed.region] + [70, 0, 0]
    if truth is not None:
        edge = truth & ~(cv2.erode(truth.astype(np.uint8), np.ones((3, 3), np.uint8)) > 0)
        out[edge] = [0, 230, 230]
    return cv2.resize(np.clip(out, 0, 255).astype(np.uint8), None, fx=2, fy=2, interpolation=cv2.INTER_NEAREST)


def segmenter_rows(models: dict[str, Path]) -> str:
    """False occluders on bare faces and real frames kept, per model; contact sheets of the worst cases."""
    fuser = Fuser()
    segmenters = {name: FaceSegmenter(fuser.runtime.session(path)) for name, path in models.items()}
    groups = bare_photos()
    false: dict[str, dict[str, list[tuple[int, Path]]]] = {m: {g: [] for g in groups} for m in models}
    tiles: dict[Path, dict[str, np.ndarray]] = {}
    for group, photos in groups.items():
        for photo in photos:
            try:
                parsed = {m: parse(fuser, s, photo) for m, s in segmenters.items()}
            except (FacefuseError, ValueError):
                continue
            for m, p in parsed.items():
                false[m][group].append((int((p.region & (p.occluder > OCCLUDER_FLOOR)).sum()), photo))
                tiles.setdefault(photo, {})[m] = overlay(p)
    lines = ["### False occluders on bare faces (segmenter alone)", "",
             "Pixels of the fused region (FaceMesh's face oval in the segmenter's 128 px crop) with occluder "
             f"probability > {OCCLUDER_FLOOR} (what the segment stage keeps of the target, before growing), on "
             "occluder-free photos. Fewer is better: each such pixel keeps the target's beard, shadow or brow on "
             "the new face. knn_examples/train is among the segmenter's training photos (scenes).", "",
             "| model | group | photos | median px | mean px | photos > 24 px | worst |", "|---|---|---|---|---|---|---|"]
    for m in models:
        everything = []
        for group, values in false[m].items():
            counts = [v for v, _ in values]
            everything += counts
            worst = max(values, key=lambda v: v[0])
            lines.append(f"| {m} | {group} | {len(counts)} | {median(counts):.0f} | {np.mean(counts):.0f} | "
                         f"{sum(c > 24 for c in counts)} | {worst[0]} ({worst[1].parent.name}/{worst[1].name}) |")
        lines.append(f"| **{m}** | **all** | {len(everything)} | {median(everything):.0f} | "
                     f"{np.mean(everything):.0f} | {sum(c > 24 for c in everything)} | |")
    first = next(iter(models))
    worst = sorted(((v, p) for values in false[first].values() for v, p in values), key=lambda vp: vp[0])[-12:]
    sheet = grid([np.concatenate([tiles[p][m] for m in models], 1) for _, p in worst[::-1]], 2)
    cv2.imwrite(str(ARTIFACTS / "segmenter_false_occluders.png"), cv2.cvtColor(sheet, cv2.COLOR_RGB2BGR))

    lines += ["", "### Real glasses frames kept (hard/glasses and the shared sets' photos with glasses)", "",
              "Frame pixels by rule (dark pixels of the face oval between the brows and the nose's middle, eyes and "
              "brows excluded; thin metal frames are too light for the rule: their frame px are few or none): the "
              "share the segment stage keeps (its occluder mask ≥ 0.5 with segmentation=auto, grown 2 px at 128 px; "
              "the last row: with segmentation=whole), and the occluder pixels in the fused region.", "",
              "| photo | frame px (rule) | " + " | ".join(f"{m}: frame kept | {m}: occluder px" for m in models)
              + " |", "|---|---|" + "---|---|" * len(models)]
    glasses_tiles = []
    shares: dict[str, list[float]] = {m: [] for m in models}
    whole_shares: dict[str, list[float]] = {m: [] for m in models}
    for photo in glasses_photos():
        try:
            parsed = {m: parse(fuser, s, photo) for m, s in segmenters.items()}
        except (FacefuseError, ValueError):
            continue
        truth = frame_truth(parsed[first])
        cells = []
        for m, p in parsed.items():
            share = float(kept(p.occluder)[truth].mean()) if truth.sum() >= 20 else float("nan")
            if truth.sum() >= 20:
                shares[m].append(share)
                whole_shares[m].append(float(kept(p.occluder, "whole")[truth].mean()))
            cells.append(f"{share:.0%}" if truth.sum() >= 20 else "–")
            cells.append(str(int((p.region & (p.occluder > OCCLUDER_FLOOR)).sum())))
        lines.append(f"| {_key(photo)} | {int(truth.sum())} | " + " | ".join(cells) + " |")
        glasses_tiles.append(np.concatenate([overlay(p, truth) for p in parsed.values()], 1))
    lines.append("| **mean** (frames ≥ 20 px) | | " + " | ".join(f"{np.mean(shares[m]):.0%} | " for m in models)
                 + " |")
    lines.append("| **mean, segmentation=whole** (frames ≥ 20 px) | | "
                 + " | ".join(f"{np.mean(whole_shares[m]):.0%} | " for m in models) + " |")
    cv2.imwrite(str(ARTIFACTS / "segmenter_glasses.png"), cv2.cvtColor(grid(glasses_tiles, 4), cv2.COLOR_RGB2BGR))
    lines += ["", "### Real occluded photos (faces/hard/occluded: microphone, hands, phone, fingers, hair, hat)", "",
              "Occluder pixels (p > 0.35) in the fused region; no truth masks exist, so the sheet "
              "(`artifacts/segmenter_occluded.png`) is the judge.", "",
              "| photo | " + " | ".join(f"{m}: occluder px" for m in models) + " |", "|---|" + "---|" * len(models)]
    occluded_tiles = []
    for photo in sorted((HARD / "occluded").iterdir()):
        try:
            parsed = {m: parse(fuser, s, photo) for m, s in segmenters.items()}
        except (FacefuseError, ValueError):
            continue
        lines.append(f"| {_key(photo)} | " + " | ".join(
            str(int((p.region & (p.occluder > OCCLUDER_FLOOR)).sum())) for p in parsed.values()) + " |")
        occluded_tiles.append(np.concatenate([overlay(p) for p in parsed.values()], 1))
    cv2.imwrite(str(ARTIFACTS / "segmenter_occluded.png"), cv2.cvtColor(grid(occluded_tiles, 2), cv2.COLOR_RGB2BGR))
    lines.append("")
    lines.append("Contact sheets: `artifacts/segmenter_false_occluders.png` (the 12 worst bare faces of the first "
                 "model, models side by side), `artifacts/segmenter_glasses.png`, `artifacts/segmenter_occluded.png`.")
    return "\n".join(lines)


def grid(tiles: list[np.ndarray], columns: int) -> np.ndarray:
    """Equal-sized tiles row by row, the last row padded with black."""
    blank = np.zeros_like(tiles[0])
    tiles = tiles + [blank] * (-len(tiles) % columns)
    return np.concatenate([np.concatenate(tiles[i:i + columns], 1) for i in range(0, len(tiles), columns)], 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("pairs", "segmenter", "all"), default="all")
    parser.add_argument("--models", default=None,
                        help="name=path.onnx,...: segmenter part: the models compared (default: the package's, as "
                             "'shipped'); pairs part: median rows of these besides the package's")
    args = parser.parse_args()
    given = dict(item.split("=", 1) for item in args.models.split(",")) if args.models else {}
    if args.part in ("pairs", "all"):
        pairs_section({name: Path(path) for name, path in given.items()})
    if args.part in ("segmenter", "all"):
        models = given or {"shipped": Fuser().store.ensure(SEGMENTER_MODEL)}
        header = ["## Segmenter occluders on real photos (`benchmarks/occluder_masks.py --part segmenter`)", "",
                  f"Machine: {machine()}. Run: `{' '.join(sys.argv[1:]) or 'defaults'}`.", ""]
        text = "\n".join(header) + segmenter_rows({k: Path(v) for k, v in models.items()})
        print(write_section("segmenter_occluders", text).read_text())


if __name__ == "__main__":
    main()
