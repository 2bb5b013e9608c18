"""Restorer: does a loss term earn its place? An A/B of teacher fine-tunes from the same checkpoint, same seed, same
steps and schedule, each run with one loss term more than the plain one (an adversarial patch discriminator trained
here, a Fourier-amplitude term, ...).

Judged three ways, as issue 21 asks: the hold-out set (PSNR / SSIM over all hold-out faces, and texture: the
Laplacian variance of the output ÷ the ground truth's, median — an L1 restorer is too smooth, < 1); poor sources in
a fusion (each arm's model as the restorer, ``restore=on``: cosine to a sharp photo of the source person and fused
sharpness, the same 18 pairs as ``benchmarks/restorer.py``); and a contact sheet of ``faces/hard/poor`` (bicubic |
start | each arm), written under the A/B folder, never committed.

``--start`` is the checkpoint every arm began from (a whole-model ``teacher.pt``); each ``--arm LABEL=FOLDER`` one
run's output folder (``facefuse train restorer --until teacher --teacher-init START [--adversarial-weight W]
--frequency-weight W``, W = 0 for the plain arm); the first arm is the plain one.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import cv2
import numpy as np
import torch

from common import ARTIFACTS, machine, median, write_section
from quality import identity_sets
from restorer import ONE_THREAD, poor_photo_rows, poor_sources

from facefuse.config import StoreConfig
from facefuse.fusion.restorer import RestoreConfig, Restorer
from facefuse.pipeline import Fuser, FuserConfig
from facefuse_eval.fusion import IdentityJudge


def texture(images: list[np.ndarray], truth: list[np.ndarray]) -> float:
    """Median over images of var(Laplacian(output grey)) ÷ var(Laplacian(truth grey)): 1 = as much fine texture."""
    def lap(x: np.ndarray) -> float:
        return float(cv2.Laplacian(cv2.cvtColor(x.astype(np.float32), cv2.COLOR_RGB2GRAY), cv2.CV_32F).var())
    return median([lap(a) / max(lap(b), 1e-12) for a, b in zip(images, truth)])


def holdout(models: dict[str, torch.nn.Module], limit: int | None) -> dict:
    from facefuse_training.restorer.config import RestorerConfig
    from facefuse_training.restorer.data import holdout_pairs
    from facefuse_training.restorer.evaluate import bicubic, holdout_report, predict
    from facefuse_training.restorer.teacher import holdout_images

    config = RestorerConfig(out=Path("."), holdout_images=limit)
    pairs = holdout_pairs(holdout_images(config), config.degrade)
    report = holdout_report(pairs, models, teacher="start")
    gt = [p.gt for p in pairs]
    report["texture"] = {"bicubic": texture([bicubic(p.small, config.size) for p in pairs], gt),
                         **{n: texture(predict(m, [p.lq for p in pairs]), gt) for n, m in models.items()}}
    return report


def export(model: torch.nn.Module, path: Path) -> Path:
    from facefuse_training.common.export import export_onnx
    return export_onnx(model, path, torch.zeros(1, 3, 64, 64), multiple=model.config.multiple)


def sheet(fuser: Fuser, restorers: dict[str, Restorer], path: Path) -> Path:
    rows = poor_photo_rows(fuser, list(restorers.values()))
    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), np.concatenate(rows, axis=0)[:, :, ::-1])
    return path


def arm(text: str) -> tuple[str, Path]:
    label, _, folder = text.partition("=")
    if not folder:
        raise argparse.ArgumentTypeError(f"{text}: an arm is LABEL=FOLDER")
    return label, Path(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", type=Path, required=True, help="the teacher.pt every arm started from")
    parser.add_argument("--arm", type=arm, action="append", required=True,
                        help="LABEL=FOLDER of one fine-tune (repeat; the first is the plain run)")
    parser.add_argument("--holdout", type=int, default=None, help="hold-out faces (default all)")
    parser.add_argument("--people", type=int, default=None, help="people of the colour set in the fusion section")
    parser.add_argument("--work", type=Path, default=ARTIFACTS / "restorer-loss-ab")
    parser.add_argument("--section", default="restorer_loss_ab")
    parser.add_argument("--title", default="Restorer loss terms, A/B (issue 21)")
    parser.add_argument("--what", default="one more loss term than the plain run",
                        help="what the arms after the first add (words for the section)")
    args = parser.parse_args()
    load = lambda p: torch.load(p, map_location="cpu", weights_only=False).eval()  # noqa: E731
    runs = dict(args.arm)
    models = {"start": load(args.start)} | {n: load(d / "teacher.pt") for n, d in runs.items()}
    logs = {n: [json.loads(x) for x in (d / "train.log.jsonl").read_text().splitlines()] for n, d in runs.items()}
    table = holdout(models, args.holdout)

    store = StoreConfig.from_env()
    files = {n: export(models[n], args.work / (re.sub(r"[^\w.-]+", "_", n) + ".onnx")) for n in models}
    fusers = {"off": Fuser(FuserConfig(store=store, runtime=ONE_THREAD))}
    fusers |= {n: Fuser(FuserConfig(store=store, runtime=ONE_THREAD, restore=RestoreConfig(model=files[n])))
               for n in runs}
    judge = IdentityJudge(fusers["off"].store, fusers["off"].runtime)
    people = identity_sets(False)["colour"][: args.people]
    poor = poor_sources(fusers, judge, people, np.random.default_rng(21), degrade=True,
                        modes={n: {"restore": "on"} for n in runs})
    restorers = {n: Restorer(fusers["off"].runtime.session(f)) for n, f in files.items()}
    picture = sheet(fusers["off"], restorers, args.work / "hard_poor_ab.png")
    results = {"holdout": table, "poor": poor, "arms": list(runs), "what": args.what, "title": args.title,
               "logs": {n: {"steps": lg[-1]["step"], "last": lg[-1]} for n, lg in logs.items()}, "sheet": str(picture)}
    (args.work / "ab.json").write_text(json.dumps(results, indent=2, default=float))
    write_section(args.section, render(results))
    print((Path(__file__).parent / "results" / f"{args.section}.md").read_text())


def render(r: dict) -> str:
    h, poor, logs, arms = r["holdout"], r["poor"], r["logs"], r["arms"]
    bic = h["bicubic"]
    lines = [
        f"## {r['title']}",
        "",
        f"`benchmarks/restorer_loss_ab.py` on {machine()}. Teacher fine-tunes from the same checkpoint, the same "
        f"seed, batches and lr schedule ({logs[arms[0]]['steps']} steps), each later arm with {r['what']}. Hold-out: "
        f"{int(h['images']['count'])} UTKFace faces; texture = Laplacian variance of the output ÷ the truth's "
        "(median; 1 = as much fine detail as the real face). Contact sheet of faces/hard/poor (bicubic | start | "
        "each arm): `artifacts/restorer-loss-ab/hard_poor_ab.png` (not committed).",
        "",
        "| model | PSNR dB | SSIM | gain over bicubic dB / SSIM | texture |",
        "|---|---|---|---|---|",
        f"| bicubic | {bic['psnr_db']:.2f} | {bic['ssim']:.3f} | +0.00 / +0.000 | {h['texture']['bicubic']:.2f} |",
    ]
    for name in ("start", *arms):
        x = h[name]
        label = "start (every arm's checkpoint)" if name == "start" else f"fine-tuned, {name}"
        lines.append(f"| {label} | {x['psnr_db']:.2f} | {x['ssim']:.3f} | {x['psnr_db'] - bic['psnr_db']:+.2f} / "
                     f"{x['ssim'] - bic['ssim']:+.3f} | {h['texture'][name]:.2f} |")
    lines += ["", f"Poor sources in a fusion ({poor['pairs']} pairs, faces {poor['face_px'][0]:.0f}–"
              f"{poor['face_px'][1]:.0f} px + JPEG 30–40, each arm's model as the restorer with `restore=on`; judge "
              "MobileFaceNet against a different sharp photo of the source person):", "",
              "| restorer | cos to reference | Δcos vs off (mean / worst) | fused-face sharpness ÷ off |",
              "|---|---|---|---|"]
    for name in ("off", *arms):
        x = poor[name]
        label = "none (restore off)" if name == "off" else name
        lines.append(f"| {label} | {x['cos']:.3f} | {x['delta_cos']:+.3f} / {x['worst_delta_cos']:+.3f} | "
                     f"{x['sharp_ratio']:.2f}× |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
