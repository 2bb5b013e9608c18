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
from common import machine, write_section
from naturalness import Bench, Gallery, Tally, photo_sets, worst_sheets

from facefuse.analysis.segmentation import HAIR
from facefuse.fusion import blend, detail, mesh_engine, occlusion, relight
from facefuse.stages import segment
from facefuse.fusion.engine import FusionOptions


@contextlib.contextmanager
def replaced(module, name: str, value) -> Iterator[None]:
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)


def _no_relight(face_lab, target_lab, face_skin, target_skin, face_width):
    import cv2
    return cv2.cvtColor(face_lab, cv2.COLOR_Lab2RGB)


def patched(module, **values) -> contextlib.ExitStack:
    stack = contextlib.ExitStack()
    for name, value in values.items():
        stack.enter_context(replaced(module, name, value))
    return stack


def _masks_without(change: Callable[[occlusion.OcclusionMasks], occlusion.OcclusionMasks] | None = None,
                   target_hair: bool = True):
    """The segment stage's masks with one decision undone: ``change`` applied to them, or the segmenter's hair
    probability on the target zeroed (its hair never kept on top, never counted as skin)."""
    inner = occlusion.occlusion_masks

    class HairlessTarget:
        def __init__(self, segmenter) -> None:
            self.segmenter = segmenter

        def probabilities(self, crops):
            target, source = self.segmenter.probabilities(crops)
            target = target.copy()
            target[HAIR] = 0.0
            return target, source

    def masks(segmenter, rendered, photo):
        out = inner(segmenter if target_hair else HairlessTarget(segmenter), rendered, photo)
        return out if change is None else change(out)
    return replaced(segment, "occlusion_masks", masks)


_render_with_photo = mesh_engine.MeshFusionEngine.render


def _render_from_crop(self, source, target_crop, to_crop, target_face, options, photo=None):
    """The mesh engine remapping the align stage's crop instead of the photo."""
    return _render_with_photo(self, source, target_crop, to_crop, target_face, options)


VARIANTS: dict[str, tuple[dict, Callable[[], contextlib.AbstractContextManager]]] = {
    "defaults": ({}, contextlib.nullcontext),
    "relight: histogram match only": ({}, lambda: replaced(blend, "relight", _no_relight)),
    "relight: σ 12 %": ({}, lambda: replaced(relight, "SHADING_SIGMA_FRACTION", 0.12)),
    "relight: σ 20 %": ({}, lambda: replaced(relight, "SHADING_SIGMA_FRACTION", 0.20)),
    "relight: texture contrast not scaled by the light (before)": ({}, lambda: replaced(
        relight, "TEXTURE_CONTRAST_LIMITS", (1.0, 1.0))),
    "detail: one gain for the face and band σ 1 px (before)": ({}, lambda: patched(
        detail, LOCAL_SIGMA_FRACTION=100.0, HIGH_PASS_SIGMA=1.0, GAIN_LIMITS=(-0.7, 2.5))),
    "detail: band σ 1 px": ({}, lambda: replaced(detail, "HIGH_PASS_SIGMA", 1.0)),
    "light = shape": ({"light": "shape"}, contextlib.nullcontext),
    "segmentation off": ({"segmentation": "off"}, contextlib.nullcontext),
    "segmentation: source pixels never hidden": ({}, lambda: _masks_without(
        lambda m: replace(m, source_hidden=np.zeros_like(m.source_hidden)))),
    "segmentation: target hair never on top": ({}, lambda: _masks_without(target_hair=False)),
    "segmentation: target occluders not on top": ({}, lambda: _masks_without(
        lambda m: replace(m, target_keep=np.zeros_like(m.target_keep)))),
    "segmentation: skin masks geometric only": ({}, lambda: _masks_without(
        lambda m: replace(m, target_skin=np.ones_like(m.target_skin), source_skin=np.ones_like(m.source_skin)))),
    "detail step off": ({}, lambda: replaced(blend, "match_detail", lambda out, photo, w, s: out)),
    "make-up kept (makeup=source)": ({"makeup": "source"}, contextlib.nullcontext),
    "sharpen 0": ({"sharpen": 0.0}, contextlib.nullcontext),
    "feature degree 100": ({"feature_degree": 100.0}, contextlib.nullcontext),
    "profile degree 100": ({"profile_degree": 100.0}, contextlib.nullcontext),
    "paste-back mask shrunk to 95 % of the oval (before)": ({}, lambda: replaced(mesh_engine, "MASK_SCALE", 0.95)),
    "target resampled twice (align crop and render)": ({}, lambda: replaced(
        mesh_engine.MeshFusionEngine, "render", _render_from_crop)),
}


def pairs(people_per_set: int) -> list[tuple[str, str, str, str]]:
    """(set, source person, source photo, target photo) of the subset."""
    out = []
    for set_name, photo_set in photo_sets(["face-api-js", "hard"]).items():
        people = photo_set.people
        for person, photos in list(people.items())[:people_per_set]:
            out += [(set_name, other, str(people[other][0]), str(photos[0])) for other in people if other != person]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--people", type=int, default=3, help="target people per set")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated variant names")
    assert not any("," in name for name in VARIANTS), "variant names are comma-separated on the command line"
    parser.add_argument("--section", default="identity_ablation")
    parser.add_argument("--sheets", action="store_true",
                        help="contact sheets of each variant's worst pairs (artifacts/worst_*_ablation_<n>.png)")
    args = parser.parse_args()
    bench = Bench()
    sets = photo_sets(["face-api-js", "hard"])
    galleries = {name: Gallery(bench, {n: ps.people[n][-1] for n in ps.people}) for name, ps in sets.items()}
    subset = pairs(args.people)
    rows = []
    for name in args.variants.split(","):
        options, patch = VARIANTS[name]
        tally = Tally()
        with patch():
            for set_name, person, source, target in subset:
                bench.fuse(Path(source), Path(target), FusionOptions(visible_label=False, **options), tally,
                           galleries[set_name], person)
        if args.sheets:
            worst_sheets(bench, f"ablation_{list(VARIANTS).index(name)}", tally.cases)
        largest = np.array(tally.smear_largest) * 100
        rows.append(f"| {name} | {len(tally.top1)} | {100 * np.mean(tally.top1):.1f} % | "
                    f"{100 * np.mean(tally.dlib_top1):.1f} % | {100 * np.mean(tally.blotch):.2f} % | "
                    f"{np.mean(tally.mean_dl):.2f} | {100 * np.mean(largest <= 1.0):.0f} % | "
                    f"{np.median(tally.sharpness):.2f} |")
        print(rows[-1], flush=True)
    lines = ["## Identity ablation (`benchmarks/identity_ablation.py`)", "",
             f"Machine: {machine()}. Run: `{' '.join(sys.argv[1:]) or 'defaults'}`. {len(subset)} cross-person pairs "
             f"(face-api-js and faces/hard/same-person, targets: the first {args.people} people of each), one change "
             "at a time against the defaults.", "",
             "| variant | pairs | identity top-1 MobileFaceNet | dlib | blotch share mean | mean |ΔL| | "
             "largest smear ≤ 1 % | sharpness median |", "|---|---|---|---|---|---|---|---|", *rows]
    print(write_section(args.section, "\n".join(lines)).read_text())


if __name__ == "__main__":
    main()
