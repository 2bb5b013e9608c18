"""Why occluders come back below the goal: the occluder pairs of ``naturalness.py`` (a dark glasses frame and a
skin-coloured bar pasted onto the target) split into their two parts, with the PSNR inside each and how much of each
the segment stage's ``target_keep`` mask covers (mean weight, and the share of pixels kept whole: a pixel kept at
0.9 still takes a tenth of the new face, ~12 levels on a dark frame). Writes benchmarks/results/occluder_masks.md.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import cv2
import numpy as np
from common import machine, median, write_section
from naturalness import Bench, paste_occluder, photo_sets

from facefuse.errors import FacefuseError
from facefuse.fusion.engine import FusionOptions
from facefuse.stages.base import Stage
from facefuse.stages.record import Record

BAR_COLOUR = (214, 160, 130)  # paste_occluder's bar


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


def main() -> None:
    bench = Bench()
    seen: list[Record] = []
    fuser = bench.fuser.with_stage(Keep(seen), after="segment")
    sets = photo_sets(["face-api-js", "knn_examples", "att-faces", "hard"])
    photos = [ps[0] for photo_set in sets.values() for ps in list(photo_set.people.values())[:4]]
    rows, figures = [], []
    for source, target in zip(photos, photos[1:] + photos[:1]):
        analysis = fuser.analyze(target)
        face = max(analysis.faces, key=lambda f: f.area)
        occluded, mask = paste_occluder(analysis.image, face)
        bar = mask & np.all(occluded == BAR_COLOUR, axis=-1)
        frame = mask & ~bar
        seen.clear()
        try:
            out = fuser.fuse(source, occluded, FusionOptions(visible_label=False)).image
        except FacefuseError:
            continue
        record = seen[-1]
        height, width = occluded.shape[:2]
        keep = cv2.warpAffine(record.masks.target_keep, cv2.invertAffineTransform(record.rendered.matrix),
                              (width, height), flags=cv2.INTER_LINEAR)
        values = (psnr(out[mask], occluded[mask]), psnr(out[frame], occluded[frame]), psnr(out[bar], occluded[bar]),
                  keep[frame].mean(), (keep[frame] > 0.99).mean(), keep[bar].mean(), (keep[bar] > 0.99).mean())
        figures.append(values)
        rows.append(f"| {target.parent.name}/{target.name} | {record.rendered.crop.shape[0]} | "
                    + " | ".join(f"{v:.1f} dB" for v in values[:3]) + " | "
                    + " | ".join(f"{v:.2f}" for v in values[3:]) + " |")
    medians = [median([f[i] for f in figures]) for i in range(7)]
    lines = [
        "## Occluder masks (`benchmarks/occluder_masks.py`)", "",
        f"Machine: {machine()}. Run: `{' '.join(sys.argv[1:]) or 'defaults'}`. The occluder pairs of "
        "`naturalness.py` (segmentation=auto), each occluder split into the glasses frame and the skin-coloured "
        "bar; `keep` is the segment stage's `target_keep` (the target's photo stays on top where it is 1) warped "
        "back onto the photo: its mean over the part, and the share of the part's pixels it keeps whole (> 0.99).",
        "",
        "| target | crop px | PSNR all | PSNR frame | PSNR bar | keep frame mean | frame kept whole | keep bar mean "
        "| bar kept whole |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        f"| **median** ({len(figures)} pairs) | | " + " | ".join(f"{v:.1f} dB" for v in medians[:3]) + " | "
        + " | ".join(f"{v:.2f}" for v in medians[3:]) + " |",
    ]
    print(write_section("occluder_masks", "\n".join(lines)).read_text())


if __name__ == "__main__":
    main()
