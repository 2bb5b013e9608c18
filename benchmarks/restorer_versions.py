"""Two restorer models in the same fusions: does a newly trained student help more than the one it replaces?

`benchmarks/restorer.py` measures one model on the pipeline of its day, so the same rows of two runs days apart
mix the restorer's change with every other change to the pipeline. This fuses the same poor-source pairs (each
person's face scaled to 40–64 px + JPEG 30–40, onto two other people's photos; as `benchmarks/restorer.py`) with
each model, in one process on one tree: ``restore=on``, ``auto`` and ``auto`` + ``enhance=auto``, against
``restore=off``. Judge: MobileFaceNet (not used by the pipeline) against a different, sharp photo of the source
person.

The fifteenth stop's run compared the student shipped before it (``git show
4c0a37b:src/facefuse/models/weights/restorer.onnx > restorer_stop14.onnx``) with the new one::

    python benchmarks/restorer_versions.py --model "until the fifteenth stop" restorer_stop14.onnx \
        --model "Fourier-term student (shipped)" src/facefuse/models/weights/restorer.onnx

The sixteenth stop's compared a candidate that was not shipped (a training run folder's student) with the shipped
one, in a section of its own::

    python benchmarks/restorer_versions.py --model shipped src/facefuse/models/weights/restorer.onnx \
        --model "longer-trained teacher's student (not shipped)" artifacts/restorer_t2c/restorer.onnx \
        --section restorer_versions_t2c --title "Restorer student of a longer-trained teacher against ..."
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from common import machine, write_section
from quality import identity_sets
from restorer import ONE_THREAD, poor_sources, poor_table

from facefuse.config import StoreConfig
from facefuse.fusion.restorer import RestoreConfig
from facefuse.pipeline import Fuser, FuserConfig
from facefuse_eval.fusion import IdentityJudge

MODES = {"on": {"restore": "on"}, "auto": {"restore": "auto"},
         "auto + enhance": {"restore": "auto", "enhance": "auto"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", nargs=2, action="append", metavar=("LABEL", "ONNX"), required=True,
                        help="a restorer to compare (repeat; the shipped one is src/facefuse/models/weights/)")
    parser.add_argument("--people", type=int, default=None, help="people of the colour set (default all)")
    parser.add_argument("--section", default="restorer_versions")
    parser.add_argument("--title", default="Restorer versions in the same fusions (issue 21)")
    args = parser.parse_args()
    store = StoreConfig.from_env()
    fusers = {"off": Fuser(FuserConfig(store=store, runtime=ONE_THREAD))}
    modes = {}
    for label, path in args.model:
        fuser = Fuser(FuserConfig(store=store, runtime=ONE_THREAD, restore=RestoreConfig(model=Path(path))))
        for mode, options in MODES.items():
            fusers[f"{label}, {mode}"] = fuser
            modes[f"{label}, {mode}"] = options
    judge = IdentityJudge(fusers["off"].store, fusers["off"].runtime)
    people = identity_sets(False)["colour"][:args.people]
    poor = poor_sources(fusers, judge, people, np.random.default_rng(21), degrade=True, modes=modes)
    lines = [
        f"## {args.title}",
        "",
        f"`benchmarks/restorer_versions.py` on {machine()}; ONNX Runtime 1 thread. {poor['pairs']} pairs (skipped "
        f"{poor['skipped']}): each person's face scaled to {poor['face_px'][0]:.0f}–{poor['face_px'][1]:.0f} px + "
        "JPEG 30–40, fused onto two other people's photos by each model, the same pairs and the same tree; judge "
        "MobileFaceNet against a different sharp photo of the source person. Models: "
        + "; ".join(f"{label} = `{Path(path).name}`" for label, path in args.model) + ".",
        "",
    ] + poor_table(poor, fusers, "restorer, restore")
    write_section(args.section, "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
