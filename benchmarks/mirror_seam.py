"""Seams of the mesh engine's mirror fill (issue 17 item 4): the six hard/profile sources (turned 30–55°) fused onto
frontal targets, by this tree and by an earlier commit (default: main), each in a child process of its own.

On a frontal target the source's far side is filled from its mirror partner; where the fill switched on and off
from vertex to vertex, the far side's own pixels (a fringe over the far temple, a sliver of nose) showed in patches
between mirrored ones: a dark bar on the forehead, a dark mirrored patch over one eye. Measured on the forehead
band between the brows and the hairline (the target's landmarks, :mod:`facefuse_eval.seams`): ``dip``, how far the
darkest column of the band falls below the band's median (L of CIELAB, 0–255 levels), and ``step``, the largest jump
between columns 2 px apart — a bar and a seam. Writes benchmarks/results/<section>.md and a contact sheet (target | before | after, 3× crops)
to artifacts/<section>.png.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import cv2
import numpy as np
from common import ARTIFACTS, FACES, machine, write_section
from speed_ab import base_tree

from facefuse.pipeline import Fuser
from facefuse_eval.seams import bar_and_seam, forehead_band

SOURCES = [f"hard/profile/{name}" for name in ("01_turned_45.jpg", "02_turned_30_looking_aside.jpg",
                                               "03_turned_38_flash.jpg", "04_turned_45_glasses_car.jpg",
                                               "05_turned_55_bw.jpg", "06_turned_50_red_lipstick.png")]
TARGETS = ["face_recognition/obama-480p.jpg", "face-api-js/penny/penny1.png", "face_recognition/biden.jpg"]

# one tree's outputs (and the targets' face boxes and forehead bands), saved as one .npz
CHILD = r"""
import json, sys
from pathlib import Path
import numpy as np
from facefuse.fusion.engine import FusionOptions
from facefuse.pipeline import Fuser, FuserConfig
faces, sources, targets, out = Path(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
fuser, found = Fuser(FuserConfig(analysis_cache_mb=0)), {}
for t, target in enumerate(targets):
    for s, source in enumerate(sources):
        found[f"{s}_{t}"] = fuser.fuse(faces / source, faces / target, FusionOptions(visible_label=False)).image
np.savez(out, **found)
"""


def outputs(src: Path, out: Path, targets: list[str]) -> dict[str, np.ndarray]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    subprocess.run([sys.executable, "-c", CHILD, str(FACES), json.dumps(SOURCES), json.dumps(targets), str(out)],
                   env=env, check=True)
    with np.load(out) as data:
        return {k: data[k] for k in data.files}


def forehead(fuser: Fuser, target: str) -> tuple[tuple[slice, slice], tuple[int, int, int, int]]:
    """The target's forehead band (rows, columns) and a square box around its face."""
    face = max(fuser.analyze(FACES / target).faces, key=lambda f: f.area)
    x, y, w, h = face.box
    side = int(max(w, h) * 1.5)
    return forehead_band(face.landmarks[:, :2]), (int(x + w / 2 - side / 2), int(y + h / 2 - side / 2), side, side)


def crop(image: np.ndarray, box: tuple[int, int, int, int], side: int = 240) -> np.ndarray:
    x, y, w, h = box
    padded = cv2.copyMakeBorder(image, h, h, w, w, cv2.BORDER_CONSTANT)
    return cv2.resize(padded[y + h:y + 2 * h, x + w:x + 2 * w], (side, side), interpolation=cv2.INTER_CUBIC)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base", default="main", help="the commit to compare with")
    parser.add_argument("--targets", default=",".join(TARGETS), help="comma-separated target photos (under faces/)")
    parser.add_argument("--section", default="mirror_seam", help="results section to write")
    parser.add_argument("--title", default="Seams of the mirror fill on frontal targets",
                        help="the section's heading")
    args = parser.parse_args()
    targets = args.targets.split(",")
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        before = outputs(base_tree(args.base, work / "base"), work / "base.npz", targets)
        after = outputs(Path(__file__).resolve().parents[1] / "src", work / "this.npz", targets)
    fuser, rows, sheet = Fuser(), [], []
    totals = {"before": [], "after": []}
    for t, target in enumerate(targets):
        band, box = forehead(fuser, target)
        picture = cv2.cvtColor(cv2.imread(str(FACES / target)), cv2.COLOR_BGR2RGB)
        own = bar_and_seam(picture, band)
        for s, source in enumerate(SOURCES):
            key = f"{s}_{t}"
            old, new = bar_and_seam(before[key], band), bar_and_seam(after[key], band)
            totals["before"].append(old)
            totals["after"].append(new)
            same = "yes" if np.array_equal(before[key], after[key]) else "no"
            rows.append(f"| {Path(source).name} | {target} | {own[0]:.1f} / {own[1]:.1f} | {old[0]:.1f} / {old[1]:.1f} | {new[0]:.1f} / {new[1]:.1f} "
                        f"| {same} |")
            sheet.append(np.concatenate([crop(picture, box), crop(before[key], box), crop(after[key], box)], 1))
    ARTIFACTS.mkdir(exist_ok=True)
    cv2.imwrite(str(ARTIFACTS / f"{args.section}.png"), cv2.cvtColor(np.concatenate(
        [np.concatenate(sheet[i:i + 2], 1) for i in range(0, len(sheet), 2)], 0), cv2.COLOR_RGB2BGR))
    mean = {k: np.mean(v, axis=0) for k, v in totals.items()}
    worst = {k: np.max(v, axis=0) for k, v in totals.items()}
    lines = [f"## {args.title} (`benchmarks/mirror_seam.py`)", "",
             f"Machine: {machine()}. Run: `{' '.join(sys.argv[1:])}`. The six `hard/profile` sources (turned 30–55°) fused onto the targets by "
             f"`{args.base}` (before) and by this tree (after), default options. Forehead band between the brows "
             "and the hairline (the target's mesh points 105/334 across, 151/9 down): `dip`, the darkest column's "
             "fall below the band's median lightness, and `step`, the largest jump in lightness between columns 2 px "
             "apart (CIELAB L, 0–255 levels; the frontal target's own forehead is the floor). Contact sheet: "
             f"artifacts/{args.section}.png (target | before | after).", "",
             "| source | target | target's own: dip / step | before: dip / step | after: dip / step | identical |", "|---|---|---|---|---|---|",
             *rows,
             f"| **mean** | {len(rows)} pairs | | {mean['before'][0]:.1f} / {mean['before'][1]:.1f} | "
             f"{mean['after'][0]:.1f} / {mean['after'][1]:.1f} | |",
             f"| **worst** | | | {worst['before'][0]:.1f} / {worst['before'][1]:.1f} | "
             f"{worst['after'][0]:.1f} / {worst['after'][1]:.1f} | |"]
    print(write_section(args.section, "\n".join(lines)).read_text())


if __name__ == "__main__":
    main()
