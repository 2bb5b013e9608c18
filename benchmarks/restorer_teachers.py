"""Restorer teachers side by side on the hold-out set: does training a teacher longer close the gap to +2.0 dB?

Each ``--teacher NAME=PATH`` is a whole-model ``teacher.pt`` of a training run (``facefuse train restorer``), scored
by the training package's own hold-out report (the 474 UTKFace faces never trained on, degraded with the training
degradations at a fixed seed): PSNR / SSIM against the truth, the gain over bicubic upscaling, and the gain per face
size. ``--steps NAME=N`` records how many steps that teacher was trained for, for the table.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common import ARTIFACTS, machine, write_section


def main() -> None:
    import torch

    from facefuse_training.restorer.config import RestorerConfig
    from facefuse_training.restorer.data import holdout_pairs
    from facefuse_training.restorer.evaluate import holdout_report
    from facefuse_training.restorer.teacher import holdout_images

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", action="append", required=True, metavar="NAME=PATH")
    parser.add_argument("--steps", action="append", default=[], metavar="NAME=N")
    parser.add_argument("--note", default="", help="a sentence on how the teachers were trained")
    parser.add_argument("--section", default="restorer_teachers", help="results section to write")
    parser.add_argument("--title", default="Restorer teachers on the hold-out set", help="the section's heading")
    args = parser.parse_args()
    torch.set_num_threads(1)
    teachers = dict(item.split("=", 1) for item in args.teacher)
    steps = dict(item.split("=", 1) for item in args.steps)
    config = RestorerConfig(out=ARTIFACTS / "restorer")
    pairs = holdout_pairs(holdout_images(config), config.degrade)
    models = {name: torch.load(Path(path), map_location="cpu", weights_only=False) for name, path in teachers.items()}
    report = holdout_report(pairs, models, teacher="")
    bicubic = report["bicubic"]
    buckets = report["by_face_px"]
    rows = []
    for name in teachers:
        gains = " | ".join(f"{buckets[b][name]:+.2f}" for b in buckets)
        rows.append(f"| {name} | {steps.get(name, '–')} | {report[name]['psnr_db']:.2f} | {report[name]['ssim']:.3f} | "
                    f"{report[name]['psnr_db'] - bicubic['psnr_db']:+.2f} / {report[name]['ssim'] - bicubic['ssim']:+.3f}"
                    f" | {gains} |")
    lines = [
        f"## {args.title} (`benchmarks/restorer_teachers.py`)", "",
        f"{machine()}. {len(pairs)} hold-out faces; bicubic {bicubic['psnr_db']:.2f} dB / {bicubic['ssim']:.3f}. "
        f"{args.note} Goal: ≥ +2.0 dB and ≥ +0.05 SSIM over bicubic.", "",
        "| teacher | steps trained | PSNR dB | SSIM | gain over bicubic dB / SSIM | " +
        " | ".join(f"gain dB, face {b}" for b in buckets) + " |",
        "|---|---|---|---|---|" + "---|" * len(buckets), *rows]
    print(write_section(args.section, "\n".join(lines)).read_text())


if __name__ == "__main__":
    main()
