"""Restorer hold-out: are the ground-truth faces themselves soft, and does that cap the teacher's gain?

UTKFace crops are often upscaled from small photos, so some "truths" are no sharper than the degraded input the
teacher sees. If the teacher's gain over bicubic were held down by soft truths, it would be much larger on the
sharpest third of the hold-out set than on the softest; this measures it (truth sharpness = variance of the
Laplacian of the grey 128 px truth; teacher = the run's teacher.onnx in ONNX Runtime, 1 thread).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort

from common import ARTIFACTS, machine, write_section


def laplacian_var(rgb: np.ndarray) -> float:
    grey = cv2.cvtColor((rgb * 255).astype(np.float32), cv2.COLOR_RGB2GRAY)
    return float(cv2.Laplacian(grey, cv2.CV_32F).var())


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    return float(10 * np.log10(1 / max(float(np.mean((a - b) ** 2)), 1e-12)))


def main() -> None:
    from facefuse_training.restorer.config import RestorerConfig
    from facefuse_training.restorer.data import holdout_pairs
    from facefuse_training.restorer.evaluate import bicubic
    from facefuse_training.restorer.teacher import holdout_images

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=ARTIFACTS / "restorer", help="training output folder")
    args = parser.parse_args()
    cv2.setNumThreads(1)
    config = RestorerConfig(out=args.run)
    pairs = holdout_pairs(holdout_images(config), config.degrade)
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    teacher = ort.InferenceSession(str(args.run / "teacher.onnx"), options)
    name = teacher.get_inputs()[0].name
    rows = []
    for p in pairs:
        out = teacher.run(None, {name: np.ascontiguousarray(p.lq.transpose(2, 0, 1)[None])})[0][0]
        restored = np.clip(out.transpose(1, 2, 0), 0, 1)
        plain = bicubic(p.small, config.size)
        rows.append((laplacian_var(p.gt), laplacian_var(plain), psnr(restored, p.gt) - psnr(plain, p.gt)))
    r = np.array(rows)
    cuts = np.quantile(r[:, 0], [1 / 3, 2 / 3])
    lines = ["## Restorer hold-out: soft truths (issue 21)", "",
             f"`benchmarks/restorer_truth.py` on {machine()}. {len(r)} hold-out faces; truth sharpness = variance of "
             "the Laplacian of the grey 128 px ground truth; the teacher's gain over bicubic per third of the set by "
             f"that sharpness. {np.mean(r[:, 0] <= r[:, 1]):.0%} of the truths are no sharper than the bicubic "
             "upscale of their own degraded input.", "",
             "| third of the hold-out set | faces | truth sharpness (median) | bicubic input's | teacher gain dB |",
             "|---|---|---|---|---|"]
    for label, lo, hi in (("softest", -np.inf, cuts[0]), ("middle", cuts[0], cuts[1]), ("sharpest", cuts[1], np.inf)):
        m = (r[:, 0] > lo) & (r[:, 0] <= hi)
        lines.append(f"| {label} | {int(m.sum())} | {np.median(r[m, 0]):.0f} | {np.median(r[m, 1]):.0f} | "
                     f"{np.mean(r[m, 2]):+.2f} |")
    write_section("restorer_truth", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
