"""Post-fusion enhancement after pre-restoration, on target faces under 150 px (issue 21).

`benchmarks/restorer.py`'s poor-source pairs have target faces over 150 px, where the post stage enhanced the fused
face whether it judged the source by the restored face (~100 px) or by the photo's own. This reruns the same
pairs (each person's face scaled to 40–64 px + JPEG 30–40, onto two other people's photos) with every photo first
scaled so its face is ``--target-face`` px (130): there ``restore=auto`` enlarges the source to ~100 px, 1.3× under
the target face, and only a post stage that decides on the photo's face size (2.0–3.3× smaller) enhances it.
"""

from __future__ import annotations

import argparse

import cv2
import numpy as np

from common import machine, write_section
from quality import identity_sets
from restorer import ONE_THREAD, enhancer_effect, poor_sources, poor_table

from facefuse.config import StoreConfig
from facefuse.fusion.restorer import RestoreConfig
from facefuse.pipeline import Fuser, FuserConfig
from facefuse_eval.fusion import IdentityJudge

MODES = ("off", "auto", "auto + enhance")


def scaled_people(fuser: Fuser, people, face_px: float) -> list[tuple[str, np.ndarray, object]]:
    """Each person's photo scaled (down only) so its largest face is ``face_px`` wide; references as they are."""
    out = []
    for name, photo, reference in people:
        analysis = fuser.analyze(photo)
        side = float(max(max(analysis.faces, key=lambda f: f.area).box[2:]))
        scale = min(1.0, face_px / side)
        out.append((name, cv2.resize(analysis.image, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA),
                    reference))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--people", type=int, default=None, help="people of the colour set (default all)")
    parser.add_argument("--target-face", type=float, default=130.0, help="target face side (px) after scaling")
    args = parser.parse_args()
    store = StoreConfig.from_env()
    fusers = {mode: Fuser(FuserConfig(store=store, runtime=ONE_THREAD, restore=RestoreConfig()))
              for mode in ("off", "auto")}
    fusers["auto + enhance"] = fusers["auto"]
    judge = IdentityJudge(fusers["off"].store, fusers["off"].runtime)
    people = scaled_people(fusers["off"], identity_sets(False)["colour"][:args.people], args.target_face)
    poor = poor_sources(fusers, judge, people, np.random.default_rng(21), degrade=True,
                        modes={"auto + enhance": {"restore": "auto", "enhance": "auto"}})
    lines = [
        "## Restorer: post-fusion enhancement on small target faces (issue 21)",
        "",
        f"`benchmarks/restorer_small_targets.py` on {machine()}; shipped student restorer, ONNX Runtime 1 thread. "
        f"{poor['pairs']} pairs (skipped {poor['skipped']}): the poor-source pairs of the restorer section (face "
        f"{poor['face_px'][0]:.0f}–{poor['face_px'][1]:.0f} px + JPEG 30–40) with every photo first scaled so its "
        f"face is {args.target_face:.0f} px. `restore=auto` enlarges the source to ~100 px, 1.3× under the target "
        "face: a post stage judging the source by the restored face never enhanced these (`auto + enhance` was "
        "`auto`); it now judges by the photo's own face.",
        "",
    ] + poor_table(poor, MODES, "restore")
    lines += enhancer_effect(poor["auto"], poor["auto + enhance"])
    print(write_section("restorer_small_targets", "\n".join(lines)).read_text())


if __name__ == "__main__":
    main()
