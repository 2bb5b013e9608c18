"""Which step of the fusion costs identity (issue 17): one change at a time, on a fixed subset of cross-person pairs.

Each variant switches one step off or changes one of its choices (an option where one exists, else the step's
function replaced for the run), and fuses the same pairs: face-api-js cross-person pairs (targets: the first
``--people`` people) and faces/hard/same-person cross pairs, judged as in :mod:`naturalness` (MobileFaceNet and
dlib top-1 against one reference photo per person), with the blotch share, mean |ΔL|, largest smear and the
sharpness ratio beside them so a gain in identity that gives back the light shows. Writes
benchmarks/results/identity_ablation.md.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from dataclasses import replace
from pathlib import Path
from collections.abc import Callable, Iterator

import numpy as np
from common import machine, replaced, write_section
from naturalness import Bench, Gallery, Tally, photo_sets, worst_sheets

from facefuse.analysis.segmentation import HAIR
from facefuse.fusion import blend, detail, mesh_engine, occlusion, relight, shading
from facefuse.stages import segment
from facefuse.fusion.engine import FusionOptions
from facefuse.geometry import align
from facefuse.pipeline import Fuser
from facefuse.geometry.regions import face_masks, feather, feature_zone


def _no_relight(face_lab, target_lab, face_skin, target_skin, face_width):
    import cv2
    return cv2.cvtColor(face_lab, cv2.COLOR_Lab2RGB)


def _band_split(broad_fraction: float, gate_levels: tuple[float, float]) -> Callable:
    """The shading transfer in two bands: the target's light at ``broad_fraction`` of the face width, and between
    that and the default σ the source's own shading where it differs from the target's by less than the first of
    ``gate_levels`` (L* levels; face shape), the target's where by more than the second (a cast shadow)."""
    def band_split(face_lab, target_lab, face_skin, target_skin, face_width):
        face, target = face_lab.astype(np.float32), target_lab.astype(np.float32)
        fine, broad = relight.SHADING_SIGMA_FRACTION * face_width, broad_fraction * face_width
        theirs, own = relight.skin_shading(target, target_skin, fine), relight.skin_shading(face, face_skin, fine)
        band_theirs = theirs - relight.skin_shading(target, target_skin, broad)
        band_own = own - relight.skin_shading(face, face_skin, broad)
        gap = np.abs(band_theirs[..., 0] - band_own[..., 0])
        gate = np.clip((gap - gate_levels[0]) / (gate_levels[1] - gate_levels[0]), 0.0, 1.0)[..., None]
        # the target's shading with its band replaced; relight() asks for the target's shading, then the face's
        answers = iter([theirs - band_theirs + band_own + gate * (band_theirs - band_own), own])
        with replaced(relight, "skin_shading", lambda lab, weight, sigma: next(answers)):
            return relight.relight(face_lab, target_lab, face_skin, target_skin, face_width)
    return band_split


def patched(module, **values) -> contextlib.ExitStack:
    stack = contextlib.ExitStack()
    for name, value in values.items():
        stack.enter_context(replaced(module, name, value))
    return stack


def _occluder_rule(rule: occlusion.OccluderRule):
    """The segment stage's masks with ``rule`` for the target's occluders, whatever the option says (the two halves
    of segmentation="whole" apart)."""
    inner = occlusion.occlusion_masks
    return replaced(segment, "occlusion_masks", lambda segmenter, rendered, photo, _, *rest, **named: inner(
        segmenter, rendered, photo, rule, *rest, **named))


def _masks_without(change: Callable[[occlusion.OcclusionMasks], occlusion.OcclusionMasks] | None = None,
                   target_hair: bool = True):
    """The segment stage's masks with one decision undone: ``change`` applied to them, or the segmenter's hair
    probability on the target zeroed (its hair never kept on top, never counted as skin)."""
    inner, target_half = occlusion.occlusion_masks, occlusion.target_parsing

    def masks(*args, **named):
        out = inner(*args, **named)
        return out if change is None else change(out)

    def hairless(*args, **named):
        target = target_half(*args, **named).copy()
        target[HAIR] = 0.0
        return target

    stack = contextlib.ExitStack()
    stack.enter_context(replaced(segment, "occlusion_masks", masks))
    if not target_hair:  # the target's half is parsed ahead (segment) or with the masks (occlusion)
        stack.enter_context(replaced(segment, "target_parsing", hairless))
        stack.enter_context(replaced(occlusion, "target_parsing", hairless))
    return stack


def _segmenter_sees_border(mode: str):
    """The segment stage given the target's crop with the photo's border ``mode`` ("replicated", or "grey": the
    photo's mean colour), not reflected: a tight crop (face-api-js
    stills are 150 px, the face fills them) showed the segmenter mirrored faces beyond the photo's edge, and it
    called the seam an occluder that then kept the target's forehead and far cheek (amy1, issue 17)."""
    import cv2

    def photo_crop(image, matrix, size):
        if mode == "replicated":
            return cv2.warpAffine(image, matrix, (size, size), flags=cv2.INTER_LINEAR,
                                  borderMode=cv2.BORDER_REPLICATE)
        fill = tuple(float(v) for v in image.reshape(-1, 3).mean(0))
        return cv2.warpAffine(image, matrix, (size, size), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT,
                              borderValue=fill)

    def call(self, record):
        size = record.aligned.crop.shape[0]
        photo = photo_crop(record.image, record.aligned.matrix, size)
        points = align.apply(record.aligned.matrix, record.face.face.landmarks)[:, :2]
        return replace(record, masks=occlusion.occlusion_masks(self.segmenter(), record.rendered, photo,
                                                               occlusion.OCCLUDER_RULES[record.options.segmentation],
                                                               target_points=points))
    return replaced(segment.Segment, "__call__", call)


_render_with_photo = mesh_engine.MeshFusionEngine.render


def _render_from_crop(self, source, target_crop, to_crop, target_face, options, photo=None, carry=None):
    """The mesh engine remapping the align stage's crop instead of the photo."""
    return _render_with_photo(self, source, target_crop, to_crop, target_face, options, None, carry)


def _all_the_way(function: Callable, position: int) -> Callable:
    """``function`` with its feature-degree argument (at ``position``) at 1: one half of feature degree 100."""
    def at_full(*args, **kwargs):
        return function(*args[:position], 1.0, *args[position + 1:], **kwargs)
    return at_full


def _features_at_full(grow_fraction: float, full_from: float = 0.9) -> Callable:
    """The paste-back mask with the brows, eyes and lips (grown by ``grow_fraction`` of the face width) at the
    source's alone from feature degree ``full_from`` on, the bare skin at the degree: at 90 % a tenth of the
    target's features shows through the source's."""
    def masks(points, size, feature, **kwargs):
        mask, keep, region = face_masks(points, size, feature, **kwargs)
        if feature > 0:
            zone = feather(feature_zone(points, size, grow_fraction=grow_fraction).astype(np.float32), size / 40.0)
            mask = np.maximum(mask, np.minimum(zone, mask / feature) * min(1.0, feature / full_from))
        return mask, keep, region
    return masks


_DEGREES_100_SEGMENTATION_OFF = {"segmentation": "off", "feature_degree": 100.0, "profile_degree": 100.0}


@contextlib.contextmanager
def _stacked(*patches: contextlib.AbstractContextManager) -> Iterator[None]:
    """Several patches at once (the combined variants)."""
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        yield


VARIANTS: dict[str, tuple[dict, Callable[[], contextlib.AbstractContextManager]]] = {
    "defaults": ({}, contextlib.nullcontext),
    "relight: histogram match only": ({}, lambda: replaced(blend, "relight", _no_relight)),
    "relight: σ 12 %": ({}, lambda: replaced(relight, "SHADING_SIGMA_FRACTION", 0.12)),
    "relight: σ 20 %": ({}, lambda: replaced(relight, "SHADING_SIGMA_FRACTION", 0.20)),
    "relight: band split σ 15 % gate 4–12": ({}, lambda: replaced(blend, "relight", _band_split(0.15, (4.0, 12.0)))),
    "relight: band split σ 15 % gate 2–6": ({}, lambda: replaced(blend, "relight", _band_split(0.15, (2.0, 6.0)))),
    "relight: band split σ 15 % source band always": ({}, lambda: replaced(
        blend, "relight", _band_split(0.15, (1e3, 2e3)))),
    "relight: texture contrast not scaled by the light (before)": ({}, lambda: replaced(
        relight, "TEXTURE_CONTRAST_LIMITS", (1.0, 1.0))),
    "detail: one gain for the face and band σ 1 px (before)": ({}, lambda: patched(
        detail, LOCAL_SIGMA_FRACTION=100.0, HIGH_PASS_SIGMA=1.0, GAIN_LIMITS=(-0.7, 2.5))),
    "detail: band σ 1 px": ({}, lambda: replaced(detail, "HIGH_PASS_SIGMA", 1.0)),
    "light = shape": ({"light": "shape"}, contextlib.nullcontext),
    "light = shape with residual σ 20 %": ({"light": "shape"}, lambda: replaced(
        shading, "RESIDUAL_SIGMA_FRACTION", 0.20)),
    "segmentation off": ({"segmentation": "off"}, contextlib.nullcontext),
    "segmentation: source pixels never hidden": ({}, lambda: _masks_without(
        lambda m: replace(m, source_hidden=np.zeros_like(m.source_hidden)))),
    "segmentation: target hair never on top": ({}, lambda: _masks_without(target_hair=False)),
    "segmentation: target occluders not on top": ({}, lambda: _masks_without(
        lambda m: replace(m, target_keep=np.zeros_like(m.target_keep)))),
    "segmentation=whole (occluders it is sure of kept whole and grown 1/48)": ({"segmentation": "whole"},
                                                                          contextlib.nullcontext),
    "segmentation: occluders as whole regions and grown 1/64": ({}, lambda: _occluder_rule(
        occlusion.OccluderRule(sure=occlusion.OCCLUDER_SURE, grow_divisor=64))),
    "segmentation: occluders on the ramp only and grown 1/48": ({}, lambda: _occluder_rule(
        occlusion.OccluderRule(sure=None, grow_divisor=48))),
    "segmentation: skin masks geometric only": ({}, lambda: _masks_without(
        lambda m: replace(m, target_skin=np.ones_like(m.target_skin), source_skin=np.ones_like(m.source_skin)))),
    "segmentation: the segmenter sees the photo's border replicated": ({}, lambda: _segmenter_sees_border(
        "replicated")),
    "segmentation: the segmenter sees grey beyond the target photo": ({}, lambda: _segmenter_sees_border("grey")),
    "detail step off": ({}, lambda: replaced(blend, "match_detail", lambda out, photo, w, s: out)),
    "make-up kept (makeup=source)": ({"makeup": "source"}, contextlib.nullcontext),
    "sharpen 0": ({"sharpen": 0.0}, contextlib.nullcontext),
    "feature degree 100": ({"feature_degree": 100.0}, contextlib.nullcontext),
    "profile degree 100": ({"profile_degree": 100.0}, contextlib.nullcontext),
    "profile degree 40": ({"profile_degree": 40.0}, contextlib.nullcontext),
    "profile degree 0 (the target's face contour)": ({"profile_degree": 0.0}, contextlib.nullcontext),
    "brows eyes and lips all the source's from degree 90": ({}, lambda: replaced(
        mesh_engine, "face_masks", _features_at_full(0.04))),
    "brows eyes and lips all the source's from degree 90 grown by 8 %": ({}, lambda: replaced(
        mesh_engine, "face_masks", _features_at_full(0.08))),
    "feature degree 90: points moved all the way": ({}, lambda: replaced(
        mesh_engine, "destination_geometry", _all_the_way(mesh_engine.destination_geometry, 4))),
    "feature degree 90: the source's appearance at 100 %": ({}, lambda: replaced(
        mesh_engine, "face_masks", _all_the_way(mesh_engine.face_masks, 2))),
    "the target's eyes not kept (the source's iris and sclera)": ({"eyes": "source"}, contextlib.nullcontext),
    "the target's eyes kept (eyes=target: the default before eyes=auto)": ({"eyes": "target"},
                                                                           contextlib.nullcontext),
    "paste-back mask shrunk to 95 % of the oval (before)": ({}, lambda: replaced(mesh_engine, "MASK_SCALE", 0.95)),
    "target resampled twice (align crop and render)": ({}, lambda: replaced(
        mesh_engine.MeshFusionEngine, "render", _render_from_crop)),
    # combinations: how much identity the mesh engine can give at all when the light is given up for it (a ceiling
    # to set the goal against, not a setting anyone would ship)
    "degrees 100 + segmentation off": (_DEGREES_100_SEGMENTATION_OFF, contextlib.nullcontext),
    "degrees 100 + segmentation off + histogram match only": (_DEGREES_100_SEGMENTATION_OFF, lambda: replaced(
        blend, "relight", _no_relight)),
    "segmentation off + histogram match only": ({"segmentation": "off"}, lambda: replaced(
        blend, "relight", _no_relight)),
    "ceiling: degrees 100 + segmentation off + histogram match only + detail step off": (
        _DEGREES_100_SEGMENTATION_OFF, lambda: _stacked(replaced(blend, "relight", _no_relight),
                                            replaced(blend, "match_detail", lambda out, photo, w, s: out))),
    "light = shape + degrees 100": ({"feature_degree": 100.0, "profile_degree": 100.0, "light": "shape"},
                                    contextlib.nullcontext),
    "light = shape + degrees 100 + segmentation off": ({**_DEGREES_100_SEGMENTATION_OFF, "light": "shape"},
                                                       contextlib.nullcontext),
}


def pairs(people_per_set: int) -> list[tuple[str, str, str, str]]:
    """(set, source person, source photo, target photo) of the subset."""
    out = []
    for set_name, photo_set in photo_sets(["face-api-js", "hard"]).items():
        people = photo_set.people
        for person, photos in list(people.items())[:people_per_set]:
            out += [(set_name, other, str(people[other][0]), str(photos[0])) for other in people if other != person]
    return out


def judges_ceiling(bench: Bench, subset: list[tuple[str, str, str, str]], galleries: dict[str, Gallery]) -> str:
    """The row of the unfused source photos, judged exactly as the outputs are: what a perfect fusion could score
    (the judges' own errors between two photos of a person), so a missed goal is set against the judges too."""
    top1, dlib_top1, margins = [], [], []
    for set_name, person, source, _ in subset:
        gallery = galleries[set_name]
        analysis, face = bench.largest(Path(source))
        scores = gallery.mobile @ bench.judge.embed(analysis.image, face)
        own = gallery.names.index(person)
        margins.append(float(scores[own] - np.delete(scores, own).max()))
        top1.append(margins[-1] > 0)
        dlib_top1.append(int(np.argmax(gallery.dlib @ bench.dlib_judge.embed(analysis.image, face.box))) == own)
    return (f"| no fusion: the source photo itself (the judges' ceiling) | {len(top1)} | {100 * np.mean(top1):.1f} % | "
            f"{100 * np.mean(dlib_top1):.1f} % | {np.mean(margins):+.3f} | – | – | – | – |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--people", type=int, default=3, help="target people per set")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated variant names")
    assert not any("," in name for name in VARIANTS), "variant names are comma-separated on the command line"
    parser.add_argument("--section", default="identity_ablation")
    parser.add_argument("--title", default="", help="what this run compares, added to the section's heading")
    parser.add_argument("--segmenter", action="append", default=[], metavar="NAME=PATH",
                        help="also run each variant with this segmenter ONNX file in place of the package's (a "
                             "retrained model against the shipped one); repeatable")
    parser.add_argument("--sheets", action="store_true",
                        help="contact sheets of each variant's worst pairs (artifacts/worst_*_ablation_<n>.png)")
    args = parser.parse_args()
    bench = Bench()
    # no analysis cache: with it, work kept with a cached face (the target's half of the segmenter output, its
    # triangles) would carry one variant's result into the next
    bench.fuser = Fuser(replace(bench.fuser.config, analysis_cache_mb=0))
    sets = photo_sets(["face-api-js", "hard"])
    galleries = {name: Gallery(bench, {n: ps.people[n][-1] for n in ps.people}) for name, ps in sets.items()}
    subset = pairs(args.people)
    rows = [judges_ceiling(bench, subset, galleries)]
    print(rows[0], flush=True)
    segmenters = {"": contextlib.nullcontext}
    for item in args.segmenter:
        label, path = item.split("=", 1)
        session = bench.fuser.runtime.session(path, stage="segment")
        segmenters[f", segmenter {label}"] = lambda session=session: replaced(bench.fuser.segmenter(), "session",
                                                                              session)
    for name, (suffix, swap) in ((n, s) for n in args.variants.split(",") for s in segmenters.items()):
        options, patch = VARIANTS[name]
        tally = Tally()
        with patch(), swap():
            for set_name, person, source, target in subset:
                bench.fuse(Path(source), Path(target), FusionOptions(visible_label=False, **options), tally,
                           galleries[set_name], person)
        if args.sheets:
            worst_sheets(bench, f"ablation_{list(VARIANTS).index(name)}{suffix.split()[-1] if suffix else ''}",
                         tally.cases)
        largest = np.array(tally.smear_largest) * 100
        margin = np.nanmean([c.identity_margin for c in tally.cases])
        rows.append(f"| {name}{suffix} | {len(tally.top1)} | {100 * np.mean(tally.top1):.1f} % | "
                    f"{100 * np.mean(tally.dlib_top1):.1f} % | {margin:+.3f} | {100 * np.mean(tally.blotch):.2f} % | "
                    f"{np.mean(tally.mean_dl):.2f} | {100 * np.mean(largest <= 1.0):.0f} % | "
                    f"{np.median(tally.sharpness):.2f} |")
        print(rows[-1], flush=True)
    title = "Identity ablation" + (f", {args.title}" if args.title else "")
    lines = [f"## {title} (`benchmarks/identity_ablation.py`)", "",
             f"Machine: {machine()}. Run: `{' '.join(sys.argv[1:]) or 'defaults'}`. {len(subset)} cross-person pairs "
             f"(face-api-js and faces/hard/same-person, targets: the first {args.people} people of each), one change "
             "at a time against the defaults.", "",
             "The margin is MobileFaceNet's similarity to the source's reference minus the best other person's, "
             "averaged over the pairs: it moves before a pair flips, so it separates variants that top-1 cannot.", "",
             "| variant | pairs | identity top-1 MobileFaceNet | dlib | identity margin mean | blotch share mean | "
             "mean |ΔL| | largest smear ≤ 1 % | sharpness median |", "|---|---|---|---|---|---|---|---|---|", *rows]
    print(write_section(args.section, "\n".join(lines)).read_text())


if __name__ == "__main__":
    main()
