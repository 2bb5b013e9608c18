"""Post-fusion enhancement (``enhance=auto``, issue 21) per fused face: its time in this tree against an earlier
commit's, how far the two trees' outputs differ, and each tree's post-fusion quality (``restorer.py``'s pairs).

A poor source (``biden.jpg`` with its face scaled to 48 px, JPEG 35; ``restore=auto`` restores it) is fused onto each
target; :func:`facefuse.fusion.enhance.enhance_fused` then runs on the fused photo with each tree's own defaults.
Each tree runs in a child process of its own (the base's ``src`` unpacked by ``git archive``), the trees taking turns;
medians of wall and CPU time over every turn's runs. Writes benchmarks/results/enhance_speed.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from common import machine, median, write_section
from speed_ab import SET_BY_IMPORT, base_tree

TARGETS = ["face_recognition/obama-720p.jpg", "face_recognition/obama.jpg",
           "hard/same-person/yang_mi/01_selfie_indoor_ambient.jpg", "hard/sidelight/01_lowkey_studio_woman.jpg",
           "face_recognition/lin-manuel-miranda.png"]

# one turn of one tree: the fusions made once, then every target's enhancement timed ``runs`` times
CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np
from common import FACES
from fusion_speed import small_source
from facefuse.fusion.engine import FusionOptions
from facefuse.fusion.enhance import enhance_fused
from facefuse.config import StoreConfig
from facefuse.pipeline import Fuser, FuserConfig
targets, runs, out, quality = json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5] == "1"
fuser = Fuser(FuserConfig(store=StoreConfig.from_env(), analysis_cache_mb=0))
source = small_source(fuser)
found = max(fuser.analyze(source).faces, key=lambda f: f.area).box  # as the post stage sees it: in its photo
source_px = float(max(found[2], found[3]))
restorer = fuser.restorer.model()
report, images = {}, {}
for i, name in enumerate(targets):
    target = fuser.analyze(FACES / name)
    face = max(target.faces, key=lambda f: f.area)
    fused = fuser.fuse(source, target.image, FusionOptions(restore="auto", visible_label=False)).image
    enhance_fused(fused, target.image, face, source_px, restorer)  # warm-up
    wall, cpu = [], []
    for _ in range(runs):
        start, start_cpu = time.perf_counter(), time.process_time()
        done = enhance_fused(fused, target.image, face, source_px, restorer)
        wall.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - start_cpu) * 1000)
    report[name] = {"wall": wall, "cpu": cpu, "ratio": done.ratio_after, "face": float(face.box[2])}
    images[str(i)] = done.image
np.savez(out, **images)
if quality:  # restorer.py's post-fusion pairs: 48 px sources onto target faces of 120 px or more, restore off
    from facefuse_eval.fusion import IdentityJudge
    from quality import identity_sets
    from restorer import post_fusion
    report["quality"] = post_fusion(fuser, restorer, IdentityJudge(fuser.store, fuser.runtime),
                                    identity_sets(False)["colour"], [])
print(json.dumps(report))
"""


def turn(src: Path, runs: int, out: Path, quality: bool) -> dict:
    env = {**{k: v for k, v in os.environ.items() if k not in SET_BY_IMPORT}, "PYTHONPATH": str(src)}
    done = subprocess.run([sys.executable, "-c", CHILD, str(Path(__file__).parent), json.dumps(TARGETS), str(runs),
                           str(out), "1" if quality else "0"], env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"the turn of {src} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the commit to compare with")
    parser.add_argument("--turns", type=int, default=3, help="turns of each tree (alternating)")
    parser.add_argument("--runs", type=int, default=3, help="enhancements of each fused face per turn")
    parser.add_argument("--section", default="enhance_speed")
    parser.add_argument("--title", default="", help="the section's heading")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        trees = {args.base: base_tree(args.base, Path(tmp) / "base"),
                 "this tree": Path(__file__).resolve().parents[1] / "src"}
        reports: dict[str, list[dict]] = {name: [] for name in trees}
        for index in range(args.turns):
            for name, src in trees.items():  # the last turn also measures the quality (it is deterministic)
                reports[name].append(turn(src, args.runs, Path(tmp) / f"{'base' if name != 'this tree' else 'this'}.npz",
                                          index == args.turns - 1))
        base_images, this_images = np.load(Path(tmp) / "base.npz"), np.load(Path(tmp) / "this.npz")
        rows = []
        for i, name in enumerate(TARGETS):
            cells = []
            for tree in trees:
                wall = median([w for r in reports[tree] for w in r[name]["wall"]])
                cpu = median([c for r in reports[tree] for c in r[name]["cpu"]])
                cells.append(f"{wall:.0f} / {cpu:.0f}")
            diff = np.abs(base_images[str(i)].astype(np.float64) - this_images[str(i)])
            psnr = 10 * np.log10(255.0 ** 2 / max(float((diff ** 2).mean()), 1e-12))
            ratios = " / ".join(f"{reports[t][-1][name]['ratio']:.2f}" for t in trees)
            rows.append(f"| `{name}` | {reports['this tree'][-1][name]['face']:.0f} px | {' | '.join(cells)} | "
                        f"{ratios} | {diff.max():.0f} | {psnr:.1f} dB |")
    quality = {tree: reports[tree][-1]["quality"] for tree in trees}
    rows_quality = [
        f"| {tree} | {q['pairs']} | {q['ratio_before']:.2f} → {q['ratio_after']:.2f} | "
        f"{q['ratio_p10_before']:.2f} → {q['ratio_p10_after']:.2f} | {q['gain']:.2f} | "
        f"{q['cos_before']:.3f} → {q['cos_after']:.3f} (worst change {q['cos_min_delta']:+.3f}) | "
        f"{q['smear_before']:.2f} → {q['smear_after']:.2f} % (worst change {q['smear_max_after_minus_before']:+.2f} pt) |"
        for tree, q in quality.items()]
    title = args.title or f"Post-fusion enhancement per fused face, this tree against {args.base}"
    lines = [
        f"## {title} (`benchmarks/enhance_speed.py`)",
        "",
        f"Machine: {machine()}; load average {load:.1f} at the start. A poor source (`biden.jpg`, face scaled to 48 "
        "px, JPEG 35; `restore=auto` restores it) fused onto each target, then `enhance_fused` on the fused photo "
        f"with each tree's defaults: {args.turns} turns per tree in child processes taking turns, {args.runs} runs "
        "per turn after a warm-up (ms, median, wall / CPU of the process). Skin sharpness ÷ the photo's after "
        "enhancement in each tree, and the two trees' outputs' largest difference and PSNR (the whole photo).",
        "",
        f"| target | face | {args.base}: ms wall / CPU | this tree: ms wall / CPU | skin sharpness ÷ photo's | "
        "largest difference | PSNR |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        "The same trees on `benchmarks/restorer.py`'s post-fusion pairs (48 px sources onto target faces of 120 px or "
        "more, `restore=off` so only the enhancer acts; medians; the judge MobileFaceNet's cosine to another photo "
        "of the source person; blotch share against the target):",
        "",
        "| tree | pairs | skin sharpness ÷ photo's, median | 10th percentile | detail gain | identity cosine | "
        "blotch share |",
        "|---|---|---|---|---|---|---|",
        *rows_quality,
    ]
    print(write_section(args.section, "\n".join(lines)).read_text())


if __name__ == "__main__":
    main()
