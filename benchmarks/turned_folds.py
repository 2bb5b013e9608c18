"""Folds in the mesh engine's warp on turned targets (issue 17, far-cheek streaks): for each target, the share of its
face that takes a frontal source's pixels from a triangle turned over in the source
(:mod:`facefuse_eval.warp_folds`), with the engine's surface triangles and with the projection's Delaunay
triangulation it used before, and with the surface triangles plus the engine's mirror fill (counted as it blends:
see :func:`facefuse_eval.warp_folds.folded_share`). Sources: the first photo of each face-api-js person. Writes
benchmarks/results/turned_folds.md.
"""

from __future__ import annotations

import sys
import time

import numpy as np
from common import FACES, machine, median, write_section

from facefuse.fusion.engine import FusionOptions
from facefuse.fusion.mesh_engine import RING_SCALE, MeshFusionEngine, border_points, mirror_fill, surface_triangles
from facefuse.geometry import align
from facefuse.geometry.regions import FACE_OVAL, shrink
from facefuse.pipeline import Fuser
from facefuse_eval.warp_folds import folded_share, projection_triangles

TARGETS = ["face-api-js/penny/penny1.png", "face-api-js/amy/amy1.png",
           "hard/same-person/audrey_hepburn/02_bw_studio_turned_35.png",
           "hard/same-person/scarlett_johansson/02_turned_45_pink_bg.jpg",
           *(f"hard/profile/{name}" for name in ("01_turned_45.jpg", "02_turned_30_looking_aside.jpg",
                                                 "03_turned_38_flash.jpg", "04_turned_45_glasses_car.jpg",
                                                 "05_turned_55_bw.jpg", "06_turned_50_red_lipstick.png"))]


def worst_source(fuser: Fuser, source) -> str:
    """The source's name and signed yaw (a source turned the other way from the target folds most)."""
    pose = max(fuser.analyze(source).faces, key=lambda f: f.area).pose
    return f"{source.name} ({pose.yaw:+.0f}°)"


def triangulation_ms(fuser: Fuser, runs: int = 30) -> list[str]:
    """Wall and CPU ms (medians of ``runs``, interleaved) of each triangulation on the 720p target of the speed
    benchmarks (face_recognition/obama-720p.jpg, its face in the engine's crop)."""
    face = max(fuser.analyze(FACES / "face_recognition/obama-720p.jpg").faces, key=lambda f: f.area)
    to_crop, size = MeshFusionEngine().crop_matrix(face, FusionOptions())
    target_3d = align.apply(to_crop, face.landmarks)
    outer = np.concatenate([shrink(target_3d[:, :2][FACE_OVAL], RING_SCALE), border_points(size)])
    spent: dict[str, list[tuple[float, float]]] = {"projection": [], "surface": []}
    for _ in range(runs):
        for label, how in (("projection", projection_triangles), ("surface", surface_triangles)):
            wall, cpu = time.perf_counter(), time.process_time()
            how(target_3d, target_3d[:, :2], outer)
            spent[label].append((1e3 * (time.perf_counter() - wall), 1e3 * (time.process_time() - cpu)))
    # the mirror fill, paid only where the two yaws differ by more than MIRROR_FROM_TURN: amy1 onto a profile
    source, turned = (max(fuser.analyze(FACES / n).faces, key=lambda f: f.area)
                      for n in ("face-api-js/amy/amy1.png", "hard/profile/06_turned_50_red_lipstick.png"))
    spent["mirror fill (amy1 onto hard/profile/06, gated pairs only)"] = []
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        mirror_fill(source, turned)
        spent["mirror fill (amy1 onto hard/profile/06, gated pairs only)"].append(
            (1e3 * (time.perf_counter() - wall), 1e3 * (time.process_time() - cpu)))
    return [f"| {label} | {median([w for w, _ in v]):.2f} | {median([c for _, c in v]):.2f} |"
            for label, v in spent.items()]


def main() -> None:
    fuser = Fuser()
    sources = [sorted(p.iterdir())[0] for p in sorted((FACES / "face-api-js").iterdir()) if p.is_dir()]
    rows = []
    for name in TARGETS:
        target = FACES / name
        faces = fuser.analyze(target).faces
        if not faces:
            rows.append(f"| {name} | no face found | – | – | – | – |")
            continue
        yaw = max(faces, key=lambda f: f.area).pose.yaw
        pairs = [s for s in sources if s.parent != target.parent]
        shares = {label: np.array([folded_share(fuser, s, target, how, mirror) for s in pairs]) * 100
                  for label, how, mirror in (("projection", projection_triangles, False),
                                             ("surface", surface_triangles, False),
                                             ("mirror", surface_triangles, True))}
        rows.append(f"| {name} | {yaw:+.0f}° | {len(pairs)} | "
                    + " | ".join(f"{shares[k].mean():.2f} % / {shares[k].max():.2f} %" for k in shares)
                    + f" | {worst_source(fuser, pairs[int(np.argmax(shares['surface']))])} |")
        print(rows[-1], flush=True)
    lines = ["## Folds in the warp on turned targets (`benchmarks/turned_folds.py`)", "",
             f"Machine: {machine()}. Run: `{' '.join(sys.argv[1:]) or 'defaults'}`. Share of the target face's pixels "
             "(mouth left out) that the mesh engine's warp takes from a triangle turned over in the source, with the "
             "faces' own points; sources: the first photo of each other face-api-js person. `projection`: Delaunay "
             "of the projected points (the engine before issue 17's fix); `surface`: the surface's own triangles, "
             "drawn far to near (`mesh_engine.surface_triangles`); `+ mirror fill`: those triangles with the engine's "
             "mirror fill (`mesh_engine.mirror_fill`: a vertex the target shows that the source shows foreshortened "
             "or turned over takes its partner's texture once the two yaws differ by more than "
             "`MIRROR_FROM_TURN`), a vertex counted by the share of its texture taken from each side. The face-api-js "
             "sources are all turned ≤ 20°: the rule before this (mirror fill from 30° of *source* yaw) never "
             "filled them, its figure is the `surface` column.", "",
             "| target | yaw | sources | projection: mean / worst | surface: mean / worst | "
             "surface + mirror fill: mean / worst | worst source (surface) |",
             "|---|---|---|---|---|---|---|", *rows, "",
             "### Cost of the triangulation and the mirror fill (720p target, once per fused face; medians of 30 "
             "interleaved runs)", "",
             "| step | wall ms | CPU ms |", "|---|---|---|", *triangulation_ms(fuser)]
    print(write_section("turned_folds", "\n".join(lines)).read_text())


if __name__ == "__main__":
    main()
