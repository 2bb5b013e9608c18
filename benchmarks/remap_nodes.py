"""Remap nodes that read far outside their own triangle (issue 17, blots of the source's backdrop on a jaw line):
over every cross pair of the shared hard photos and knn_examples (the sets whose turned and tilted targets squeeze
triangles into slivers), how far each grid node of the mesh engine's remap tables reads outside its triangle's box
in the source face — with the rasteriser's owner (the engine until the twenty-first stop) and with the triangle
:func:`facefuse.geometry.mesh.placed_nodes` places it in. A reading a few pixels out is a warp's ordinary edge; tens
or thousands of pixels out is a blot of whatever the source photo shows there. Writes
benchmarks/results/remap_nodes.md.
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np
from common import FACES, machine, write_section

from facefuse.errors import FacefuseError
from facefuse.fusion.engine import FusionOptions
from facefuse.geometry import mesh
from facefuse.pipeline import Fuser

HARD = FACES / "hard"
KNN = FACES / "face_recognition" / "knn_examples" / "train"
SINGLES = ("beard", "sidelight", "makeup", "glasses", "occluded", "profile", "poor")


def pairs() -> list[tuple[str, list]]:
    """(set name, [(source, target), …]): the hard photos' people onto each other and every single hard photo onto
    each of them; knn_examples' people onto each other (each person's first photo)."""
    people = {p.name: sorted(p.iterdir())[0] for p in sorted((HARD / "same-person").iterdir())}
    singles = [f for group in SINGLES for f in sorted((HARD / group).iterdir())]
    knn = {p.name: sorted(p.iterdir())[0] for p in sorted(KNN.iterdir())}
    hard = [(people[a], people[b]) for a, b in itertools.permutations(people, 2)]
    hard += [(s, people[b]) for s in singles for b in people]
    return [("hard", hard), ("knn_examples", [(knn[a], knn[b]) for a, b in itertools.permutations(knn, 2)])]


class Recorder:
    """Records the engine's calls to :func:`mesh.remap_tables` and the nodes they placed (an observer: the call goes
    on unchanged), so each fusion's grid can be read both ways."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.original = mesh.remap_tables

    def __call__(self, ids, sources, dst, triangles, step=1, photos=0):
        tables, nodes = self.original(ids, sources, dst, triangles, step, photos)
        self.calls.append((mesh.mesh_nodes(ids, dst, triangles, step), nodes, sources[:photos]))
        return tables, nodes


def outside_by(nodes: mesh.MeshNodes, points: np.ndarray) -> np.ndarray:
    """Per node, how far (px) its reading in ``points`` falls outside its triangle's box there."""
    read = nodes.at_nodes(points).astype(np.float64)
    triangle = points[nodes.triangles[nodes.owner]]  # (P, 3, 2)
    beyond = np.maximum(triangle.min(1) - read, 0) + np.maximum(read - triangle.max(1), 0)
    return np.hypot(beyond[:, 0], beyond[:, 1])


def main() -> None:
    argparse.ArgumentParser(description=__doc__).parse_args()
    fuser = Fuser()
    recorder = Recorder()
    mesh.remap_tables = recorder
    rows = []
    try:
        for name, set_pairs in pairs():
            worst = {"before": [], "after": []}
            counts = {"before": 0, "after": 0}
            fused = 0
            for source, target in set_pairs:
                recorder.calls.clear()
                try:
                    fuser.fuse(source, target, FusionOptions(visible_label=False))
                except FacefuseError:  # a photo the gate refuses (a profile, a face too small): nothing rendered
                    continue
                fused += 1
                for as_drawn, placed, photos in recorder.calls:
                    for label, nodes in (("before", as_drawn), ("after", placed)):
                        distance = np.max([outside_by(nodes, points) for points in photos], axis=0)
                        worst[label].append(float(distance.max()))
                        counts[label] += int((distance > 2 * mesh.SLACK).sum())
            for label in ("before", "after"):
                far = np.array(worst[label])
                rows.append(f"| {name} | {fused} of {len(set_pairs)} | {'the rasteriser' if label == 'before' else 'placed'} | "
                            f"{np.mean(far > 2 * mesh.SLACK):.0%} | {counts[label]} | {np.median(far):.1f} | "
                            f"{far.max():.0f} |")
                print(rows[-1], flush=True)
    finally:
        mesh.remap_tables = recorder.original
    text = "\n".join([
        "## Remap nodes read outside their own triangle (`benchmarks/remap_nodes.py`)", "",
        (f"On {machine()}. Every cross pair of the sets, default options. For each grid node of the mesh engine's "
         "remap tables (1/4 of the crop's pixels), how far its reading in the photos the tables sample (the target, "
         "the source, the source's mirror) falls outside its triangle's box there, with the triangle the "
         "rasteriser drew last over it and with the one `mesh.placed_nodes` places it in. A node up to "
         f"{mesh.SLACK:.0f} px out is a warp's ordinary edge (`mesh.SLACK`); the columns count nodes more than "
         f"{2 * mesh.SLACK:.0f} px out, which upsampled into round blots of whatever the photo shows there."), "",
        "| set | pairs fused | node's triangle | pairs with a node > 4 px out | nodes > 4 px out (all pairs) | "
        "farthest node per pair, median (px) | farthest node of all (px) |",
        "|---|---|---|---|---|---|---|", *rows, ""])
    print(write_section("remap_nodes", text).read_text())


if __name__ == "__main__":
    main()
