"""Quality of an optimised model against its FP32 original on held-out inputs, plus size and latency.

Each task has the metric that matters downstream: boxes and scores for detectors (a face lost or moved changes
everything after it), landmark error relative to the eye distance for the mesh (what the warp sees), cosine
similarity for embeddings (what identity retrieval sees), class agreement for the segmenter's masks, PSNR/SSIM for
generated images. The limits are fixed here, before any measurement, and every check is printed and written with its
value and its limit.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..analysis.landmarks import LEFT_EYE_INNER, LEFT_EYE_OUTER, RIGHT_EYE_INNER, RIGHT_EYE_OUTER
from ..analysis.nms import Detection, iou_xyxy
from ..errors import ErrorCode, FacefuseError
from ..models import Task

# Limits. Images: the targets. Detectors: a box that moves by less than ~5 % of its side keeps IoU above
# 0.9, and a score drift of 0.1 keeps every face well above a 0.5 gate on the same side of it. Landmarks: 2 % of
# the eye distance is about one pixel on a 50-pixel eye distance. Embeddings: identity thresholds sit near
# cosine 0.3–0.5, so 0.98 leaves retrieval unchanged.
MIN_PSNR_DB = 30.0
MIN_SSIM = 0.92
MIN_MEAN_IOU = 0.90
MAX_SCORE_DRIFT = 0.10
MAX_MEAN_NME = 0.02
MIN_COSINE = 0.98
# Segmentation: what the masks decide is which pixels stay the target's (hair, occluders) and which source pixels
# are hidden; a class changed on 3 % of a face crop is about a strand's width along the hairline, and the mean IoU
# over the classes present keeps a small class (an occluder, the brows) from vanishing under the large ones.
MIN_PIXEL_AGREEMENT = 0.97


@dataclass(frozen=True)
class Check:
    metric: str
    value: float
    limit: float
    at_least: bool

    @property
    def passed(self) -> bool:
        return self.value >= self.limit if self.at_least else self.value <= self.limit

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "value": round(self.value, 6), "limit": self.limit,
                "rule": ">=" if self.at_least else "<=", "passed": self.passed}

    def describe(self) -> str:
        rule = "≥" if self.at_least else "≤"
        return f"{'PASS' if self.passed else 'FAIL'}  {self.metric} = {self.value:.4f} (needs {rule} {self.limit})"


def compare_detections(reference: list[list[Detection]], candidate: list[list[Detection]],
                       threshold: float) -> tuple[dict[str, float], list[Check]]:
    """Each FP32 face at or above ``threshold`` is matched to the optimised model's best-overlapping box."""
    ious, drifts, missed = [], [], 0
    for ref_dets, cand_dets in zip(reference, candidate):
        cand_boxes = np.array([d.box for d in cand_dets]).reshape(-1, 4)
        for det in (d for d in ref_dets if d.score >= threshold):
            overlap = iou_xyxy(det.box, cand_boxes) if len(cand_boxes) else np.zeros(0)
            best = int(np.argmax(overlap)) if overlap.size else -1
            if best < 0 or overlap[best] < 0.5:
                missed += 1
                continue
            ious.append(float(overlap[best]))
            drifts.append(abs(det.score - cand_dets[best].score))
    metrics = {"faces": float(len(ious) + missed), "missed_faces": float(missed),
               "mean_iou": float(np.mean(ious)) if ious else 0.0, "min_iou": float(np.min(ious)) if ious else 0.0,
               "max_score_drift": float(np.max(drifts)) if drifts else 0.0,
               "mean_score_drift": float(np.mean(drifts)) if drifts else 0.0}
    checks = [Check("mean_iou", metrics["mean_iou"], MIN_MEAN_IOU, True),
              Check("max_score_drift", metrics["max_score_drift"], MAX_SCORE_DRIFT, False),
              Check("missed_faces", metrics["missed_faces"], 0.0, False)]
    return metrics, checks


def eye_distance(mesh: np.ndarray) -> float:
    right = mesh[[RIGHT_EYE_OUTER, RIGHT_EYE_INNER], :2].mean(0)
    left = mesh[[LEFT_EYE_INNER, LEFT_EYE_OUTER], :2].mean(0)
    return float(np.linalg.norm(left - right))


def compare_landmarks(reference: list[list[np.ndarray]],
                      candidate: list[list[np.ndarray]]) -> tuple[dict[str, float], list[Check]]:
    """Normalised mean error: mean 2-D point distance divided by the FP32 mesh's eye distance."""
    errors = [float(np.linalg.norm(ref[:, :2] - cand[:, :2], axis=1).mean()) / max(eye_distance(ref), 1e-6)
              for refs, cands in zip(reference, candidate) for ref, cand in zip(refs, cands)]
    metrics = {"faces": float(len(errors)), "mean_nme": float(np.mean(errors)), "max_nme": float(np.max(errors))}
    return metrics, [Check("mean_nme", metrics["mean_nme"], MAX_MEAN_NME, False)]


def compare_embeddings(reference: list[np.ndarray], candidate: list[np.ndarray]) -> tuple[dict[str, float], list[Check]]:
    ref = np.concatenate(reference)
    cand = np.concatenate(candidate)
    cos = (ref * cand).sum(1) / np.maximum(np.linalg.norm(ref, axis=1) * np.linalg.norm(cand, axis=1), 1e-12)
    metrics = {"faces": float(len(cos)), "mean_cosine": float(cos.mean()), "min_cosine": float(cos.min())}
    return metrics, [Check("min_cosine", metrics["min_cosine"], MIN_COSINE, True)]


def compare_images(reference: list[np.ndarray], candidate: list[np.ndarray]) -> tuple[dict[str, float], list[Check]]:
    """PSNR and SSIM over (H, W, 3) uint8 images; the worst image decides, so one broken face cannot hide."""
    try:
        from skimage.metrics import peak_signal_noise_ratio, structural_similarity
    except ImportError:
        raise FacefuseError(ErrorCode.INVALID_OPTION, "image quality metrics need scikit-image",
                            "pip install 'facefuse[optimize]'", {}) from None

    psnr = [float(peak_signal_noise_ratio(r, c, data_range=255)) if not np.array_equal(r, c) else 100.0
            for r, c in zip(reference, candidate)]
    ssim = [float(structural_similarity(r, c, channel_axis=-1, data_range=255)) for r, c in zip(reference, candidate)]
    metrics = {"images": float(len(psnr)), "min_psnr_db": min(psnr), "mean_psnr_db": float(np.mean(psnr)),
               "min_ssim": min(ssim), "mean_ssim": float(np.mean(ssim))}
    return metrics, [Check("min_psnr_db", metrics["min_psnr_db"], MIN_PSNR_DB, True),
                     Check("min_ssim", metrics["min_ssim"], MIN_SSIM, True)]


def compare_masks(reference: list[np.ndarray], candidate: list[np.ndarray]) -> tuple[dict[str, float], list[Check]]:
    """Class maps (the argmax of (classes, H, W) probabilities): the share of pixels whose class is unchanged, and
    the IoU of each class the FP32 map has, averaged per face and then over faces; the worst face decides the
    agreement, so one broken face cannot hide."""
    agreements, ious = [], []
    for ref, cand in zip(reference, candidate):
        ref_labels, cand_labels = ref.argmax(0), cand.argmax(0)
        agreements.append(float((ref_labels == cand_labels).mean()))
        per_class = [np.logical_and(ref_labels == c, cand_labels == c).sum()
                     / np.logical_or(ref_labels == c, cand_labels == c).sum() for c in np.unique(ref_labels)]
        ious.append(float(np.mean(per_class)))
    metrics = {"faces": float(len(agreements)), "min_pixel_agreement": min(agreements),
               "mean_pixel_agreement": float(np.mean(agreements)), "mean_class_iou": float(np.mean(ious))}
    return metrics, [Check("min_pixel_agreement", metrics["min_pixel_agreement"], MIN_PIXEL_AGREEMENT, True),
                     Check("mean_class_iou", metrics["mean_class_iou"], MIN_MEAN_IOU, True)]


def compare(task: Task, reference: list[Any], candidate: list[Any],
            detection_threshold: float = 0.5) -> tuple[dict[str, float], list[Check]]:
    if task is Task.DETECTOR:
        return compare_detections(reference, candidate, detection_threshold)
    if task is Task.LANDMARKER:
        return compare_landmarks(reference, candidate)
    if task is Task.RECOGNIZER:
        return compare_embeddings(reference, candidate)
    if task is Task.SEGMENTER:  # per photo, one probability map per face
        return compare_masks([m for maps in reference for m in maps], [m for maps in candidate for m in maps])
    # image outputs arrive per photo (one crop per face): flatten to one list of images
    return compare_images([i for images in reference for i in images], [i for images in candidate for i in images])


def paired_latency_ms(sessions: list[Any], feed: dict[str, np.ndarray], runs: int = 20,
                      warmup: int = 3) -> list[float]:
    """Median wall-clock time of one ``run`` of each session on ``feed``.

    The sessions take turns run by run, so a change in machine load (other processes on a shared CPU) affects
    all of them alike instead of whichever happened to be timed during it.
    """
    for _ in range(warmup):
        for session in sessions:
            session.run(None, feed)
    times: list[list[float]] = [[] for _ in sessions]
    for _ in range(runs):
        for session, samples in zip(sessions, times):
            start = time.perf_counter()
            session.run(None, feed)
            samples.append((time.perf_counter() - start) * 1000)
    return [statistics.median(samples) for samples in times]


@dataclass
class QualityReport:
    model: str
    precision: str
    source: str
    output: str
    settings: dict[str, Any]
    calibration_images: int
    holdout_images: int
    metrics: dict[str, float]
    checks: list[Check]
    size_bytes: dict[str, int] = field(default_factory=dict)
    latency_ms: dict[str, float] = field(default_factory=dict)
    installed: str | None = None  # cache path when installed as NAME@PRECISION

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)

    @property
    def speedup(self) -> float:
        before, after = self.latency_ms.get("fp32"), self.latency_ms.get(self.precision)
        return before / after if before and after else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["checks"] = [check.to_dict() for check in self.checks]
        out["metrics"] = {k: round(v, 6) for k, v in self.metrics.items()}
        out["latency_ms"] = {k: round(v, 3) for k, v in self.latency_ms.items()}
        out["speedup"] = round(self.speedup, 3)
        out["passed"] = self.passed
        return out

    def describe(self) -> str:
        photos = f"{self.calibration_images} calibration / " if self.precision == "int8" else ""
        lines = [f"{self.model} → {self.precision} ({Path(self.output).name}); "
                 f"{photos}{self.holdout_images} held-out photos"]
        lines += ["  " + check.describe() for check in self.checks]
        if self.size_bytes:
            lines.append(f"  size {self.size_bytes['fp32'] / 1e6:.2f} MB → {self.size_bytes[self.precision] / 1e6:.2f} MB")
        if self.latency_ms:
            lines.append(f"  median latency {self.latency_ms['fp32']:.2f} ms → {self.latency_ms[self.precision]:.2f} ms "
                         f"({self.speedup:.2f}×)")
        lines.append("RESULT: " + ("PASS" if self.passed else "FAIL"))
        if self.installed:
            lines.append(f"installed as {self.model}@{self.precision}: {self.installed}")
        return "\n".join(lines)
