"""Smears and plastic skin on the target's bare skin, judged on dlib's 68 points (not the pipeline's FaceMesh).

Defined in issue 17:
- the **bare-skin zone**: the convex hull of the 68 points *plus the forehead* (the brow points lifted by 30 % of
  the face width, away from the chin: a hull that stops at the brows never sees a forehead smear), minus each
  feature (brows, eyes, nostrils, mouth) grown by 6 % of the face width;
- **smear**: low-pass Lab (σ = 3 % of the face width) of output and target, the zone's median difference removed (a
  global tone shift is allowed), pixels with ΔE > 12; the largest 8-connected patch and the total, as shares of the
  zone. A blotch score (issue 8, σ = 8 %, |ΔL| only) averages a streak away; this one sees strands and streaks;
- **sharpness ratio**: the variance of the Laplacian of L* on the zone, output ÷ target: 1.0 is skin exactly as
  detailed as the photo around it, 0.25 is "plastic";
- **colour detail ratio** (added at round 3's fourteenth stop): the RMS of the skin's colour (a*, b*) finer than
  6 % of the face width — what the relight leaves the source's — output ÷ target on the zone: a colour-graded
  source (teal shadows, orange highlights) brought 1.3–1.6× the photo's own colour variation as teal and orange
  streaks no other score saw. Undefined (NaN) on a greyscale target.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

FOREHEAD_LIFT = 0.30  # of the face width: how far above the brows the zone reaches
FEATURE_GROWTH = 0.06  # of the face width: features grown by this before they are cut out of the zone
SMEAR_SIGMA = 0.03  # of the face width: the low-pass scale of the smear score
SMEAR_DELTA_E = 12.0  # CIE ΔE (L*, a*, b*) above which a pixel is smeared
COLOUR_DETAIL_SIGMA = 0.06  # of the face width: colour finer than this is the skin's, broader the light's
GREY_TARGET = 0.05  # a* b* RMS below which a target's skin has no colour detail to compare with
BROWS = slice(17, 27)
FEATURES = (slice(17, 22), slice(22, 27), slice(36, 42), slice(42, 48), slice(31, 36), slice(48, 60))


@dataclass(frozen=True)
class Smear:
    largest_share: float  # the largest connected smeared patch, as a share of the zone
    total_share: float


def face_width(points: np.ndarray) -> float:
    """Jaw-to-jaw width of the 68 points (pixels)."""
    return float(np.linalg.norm(points[16] - points[0]))


def bare_skin_zone(points: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Boolean mask of the bare-skin zone of one face given its 68 points (x, y in image pixels)."""
    width = face_width(points)
    chin_to_brows = points[BROWS].mean(0) - points[8]
    up = chin_to_brows / max(np.linalg.norm(chin_to_brows), 1e-6)
    lifted = points[BROWS] + FOREHEAD_LIFT * width * up
    mask = np.zeros(shape[:2], np.uint8)
    hull = cv2.convexHull(np.concatenate([points, lifted]).astype(np.float32))
    cv2.fillConvexPoly(mask, np.round(hull[:, 0]).astype(np.int32), 1)
    features = np.zeros_like(mask)
    for feature in FEATURES:
        cv2.fillConvexPoly(features, np.round(cv2.convexHull(points[feature].astype(np.float32))[:, 0])
                           .astype(np.int32), 1)
    radius = max(1, int(round(FEATURE_GROWTH * width)))
    features = cv2.dilate(features, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * radius + 1, 2 * radius + 1)))
    return (mask > 0) & (features == 0)


def _lab(image: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(image.astype(np.float32) / 255.0, cv2.COLOR_RGB2Lab)


def smear(output: np.ndarray, target: np.ndarray, zone: np.ndarray, width: float) -> Smear:
    """Largest and total smeared patch of ``output`` against ``target`` (uint8 RGB) on ``zone``."""
    area = int(zone.sum())
    if area < 16:
        return Smear(0.0, 0.0)
    sigma = max(SMEAR_SIGMA * width, 0.5)
    diff = cv2.GaussianBlur(_lab(output), (0, 0), sigma) - cv2.GaussianBlur(_lab(target), (0, 0), sigma)
    diff -= np.median(diff[zone], axis=0)
    smeared = ((np.linalg.norm(diff, axis=2) > SMEAR_DELTA_E) & zone).astype(np.uint8)
    count, _, stats, _ = cv2.connectedComponentsWithStats(smeared, connectivity=8)
    largest = int(stats[1:, cv2.CC_STAT_AREA].max()) if count > 1 else 0
    return Smear(largest / area, float(smeared.sum()) / area)


def detail_energy(image: np.ndarray, zone: np.ndarray) -> float:
    """Variance of the Laplacian of L* on ``zone``: the skin's fine detail (pores, grain, noise)."""
    lightness = _lab(image)[..., 0]
    return float(np.var(cv2.Laplacian(lightness, cv2.CV_32F, ksize=1)[zone])) if zone.any() else 0.0


def sharpness_ratio(output: np.ndarray, target: np.ndarray, zone: np.ndarray) -> float:
    """Fine detail of the output's skin over the target's on ``zone`` (1.0: as sharp as the photo)."""
    return detail_energy(output, zone) / max(detail_energy(target, zone), 1e-9)


def colour_detail(image: np.ndarray, zone: np.ndarray, width: float) -> float:
    """RMS of the a*, b* finer than ``COLOUR_DETAIL_SIGMA`` of the face ``width`` on ``zone``."""
    if not zone.any():
        return 0.0
    chroma = _lab(image)[..., 1:]
    fine = chroma - cv2.GaussianBlur(chroma, (0, 0), max(COLOUR_DETAIL_SIGMA * width, 0.5))
    return float(np.sqrt(np.mean(np.sum(fine[zone] ** 2, axis=-1))))


def colour_detail_ratio(output: np.ndarray, target: np.ndarray, zone: np.ndarray, width: float) -> float:
    """The output skin's fine colour variation over the target's on ``zone`` (1.0: as much as the photo's);
    NaN where the target has none (a greyscale photo)."""
    own = colour_detail(target, zone, width)
    return colour_detail(output, zone, width) / own if own > GREY_TARGET else float("nan")
