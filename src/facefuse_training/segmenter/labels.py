"""Per-pixel labels for real photos: FaceMesh regions in the pipeline's own 128 px aligned crop, cached once.

Why the pipeline's crop: the network must see at training time exactly what the fusion pipeline will give it
(``similarity(face.keypoints, crop_template(128))`` then ``aligned_crop``), so the face sits in the middle ~55 %
with hair, ears, neck and background around it. UTKFace photos are tight 200 px crops, so most of that 128 px
window lies outside the photo; those pixels are marked invalid here and filled with synthetic backgrounds (label
"background") at training time instead of the mirror images ``aligned_crop`` would reflect in.

Face classes come from the FaceMesh contour groups; hair is a heuristic (nearest of three colour models — skin,
the strip above the forehead, the photo's own border — inside a head-shaped prior) and pixels it cannot decide are
``IGNORE``: the loss skips them, and the precise hair supervision comes from synthetic strands with known masks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from facefuse.analysis.segmentation import (BACKGROUND, BROWS, CLASSES, EYES, FACE_CLASSES, HAIR, LIPS, NOSE,
                                            OCCLUDER, SKIN, segment_matrix)
from facefuse.analysis.segmentation import SEGMENT_SIZE as SIZE
from facefuse.geometry import align
from facefuse.geometry.regions import (FACE_OVAL, LEFT_BROW, LEFT_EYE, LIPS_OUTER, RIGHT_BROW, RIGHT_EYE,
                                       polygon_mask)

__all__ = ["BACKGROUND", "BROWS", "CLASSES", "EYES", "FACE_CLASSES", "HAIR", "IGNORE", "LIPS", "NOSE", "OCCLUDER",
           "SIZE", "SKIN"]

IGNORE = 255

# Nose points on the 468-point mesh (bridge between the eyes, side walls, wings, tip, columella); the region is
# their convex hull, so their order does not matter.
NOSE_POINTS = np.array([168, 6, 122, 351, 188, 412, 114, 343, 217, 437, 198, 420, 131, 360, 49, 279, 64, 294, 98, 327, 2,
                 94, 19, 1, 4, 5, 195, 197, 129, 358, 48, 278, 240, 460, 75, 305])


@dataclass(frozen=True)
class LabelledCrop:
    """One photo in the network's frame: pixels, which of them came from the photo, labels, and the mesh."""

    image: np.ndarray  # (128, 128, 3) uint8 RGB
    valid: np.ndarray  # (128, 128) bool: pixel lies inside the original photo
    labels: np.ndarray  # (128, 128) uint8 class index or IGNORE
    mesh: np.ndarray  # (468, 2) float32 crop coordinates


def face_labels(mesh: np.ndarray) -> np.ndarray:
    """Face classes from the mesh (crop pixels): skin = oval minus features; later polygons overwrite earlier."""
    labels = np.zeros((SIZE, SIZE), np.uint8)
    for cls, groups in ((SKIN, [FACE_OVAL]), (NOSE, [NOSE_POINTS]), (BROWS, [RIGHT_BROW, LEFT_BROW]),
                        (EYES, [RIGHT_EYE, LEFT_EYE]), (LIPS, [LIPS_OUTER])):
        for group in groups:
            polygon = _brow_polygon(mesh[group]) if cls == BROWS else mesh[group]
            if cls == NOSE:
                polygon = cv2.convexHull(polygon.astype(np.float32))[:, 0]
            labels[polygon_mask(polygon, SIZE) >= 0.5] = cls
    return labels


def _brow_polygon(points: np.ndarray) -> np.ndarray:
    """MediaPipe lists a brow as its lower arc then its upper arc, both from the temple inward: reverse the upper
    arc so the points go round the outline."""
    return np.concatenate([points[:5], points[5:][::-1]])


def hair_labels(image: np.ndarray, valid: np.ndarray, labels: np.ndarray, mesh: np.ndarray) -> np.ndarray:
    """Hair / background / IGNORE outside the face oval, from colour and a head-shaped spatial prior."""
    lab = cv2.cvtColor(image, cv2.COLOR_RGB2LAB).astype(np.float32)
    oval = mesh[FACE_OVAL]
    top, bottom = oval[:, 1].min(), oval[:, 1].max()
    left, right = oval[:, 0].min(), oval[:, 0].max()
    width, height = right - left, bottom - top
    ys, xs = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
    cx = (left + right) / 2
    # head prior: an ellipse over the oval, taller upward (the skull) and wide enough for hair at the temples
    head = ((xs - cx) / (0.72 * width)) ** 2 + ((ys - (top + 0.42 * height)) / (0.78 * height)) ** 2 <= 1.0
    face = labels > 0
    outside = valid & ~face
    strip = outside & (ys < top + 0.05 * height) & (ys > top - 0.16 * height) & (np.abs(xs - cx) < 0.35 * width)
    skin = lab[labels == SKIN]
    border = valid & ~head & ~cv2.dilate(valid.astype(np.uint8), np.ones((9, 9), np.uint8)).astype(bool) | (
        valid & ~cv2.erode(valid.astype(np.uint8), np.ones((5, 5), np.uint8)).astype(bool) & ~head)
    result = np.full((SIZE, SIZE), IGNORE, np.uint8)
    result[~valid] = BACKGROUND
    if strip.sum() < 20 or len(skin) < 50:
        return result
    centres = [np.median(skin, 0), np.median(lab[strip], 0)]
    centres.append(np.median(lab[border], 0) if border.sum() > 20 else np.array([1e4, 1e4, 1e4], np.float32))
    distance = np.stack([np.linalg.norm(lab - c, axis=-1) for c in centres])
    nearest = distance.argmin(0)
    hair_is_skin = np.linalg.norm(centres[1] - centres[0]) < 18  # bald or shaved: no hair colour to learn
    is_hair = (nearest == 1) & head & ~hair_is_skin
    confident = np.sort(distance, 0)
    clear = confident[1] - confident[0] > 6  # ambiguous colours stay IGNORE
    result[outside & is_hair & clear] = HAIR
    result[outside & (nearest != 1) & clear & (~head | (nearest == 0))] = BACKGROUND
    return result


def label_photo(image: np.ndarray, keypoints: np.ndarray, landmarks: np.ndarray) -> LabelledCrop:
    """The labelled 128 px crop of one analysed face."""
    matrix = segment_matrix(keypoints)
    crop = cv2.warpAffine(image, matrix, (SIZE, SIZE), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)
    ones = np.full(image.shape[:2], 255, np.uint8)
    valid = cv2.warpAffine(ones, matrix, (SIZE, SIZE), flags=cv2.INTER_LINEAR, borderValue=0) >= 250
    mesh = align.apply(matrix, landmarks[:, :2]).astype(np.float32)
    labels = face_labels(mesh)
    outer = hair_labels(crop, valid, labels, mesh)
    labels = np.where(labels > 0, labels, outer).astype(np.uint8)
    return LabelledCrop(crop, valid, labels, mesh)


def list_photos(folder: Path) -> list[Path]:
    """Sorted photos under ``folder`` (recursively)."""
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png", ".pgm"))


def build_cache(paths: Sequence[Path], out: Path, progress: Iterable | None = None) -> dict[str, int]:
    """Analyse each photo once (largest accepted face) and store every labelled crop in one compressed .npz."""
    from facefuse.analysis.analyzer import FaceAnalyzer
    from facefuse.config import RuntimeConfig, StoreConfig
    from facefuse.imageio import decode_image
    from facefuse.models import ModelStore
    from facefuse.runtime import Runtime

    analyzer = FaceAnalyzer(ModelStore(StoreConfig()), Runtime(RuntimeConfig(intra_op_threads=1)))
    crops: list[LabelledCrop] = []
    names: list[str] = []
    skipped = 0
    for path in progress if progress is not None else paths:
        pixels = decode_image(Path(path).read_bytes()).pixels
        faces = [f for f in analyzer.analyze(pixels).faces if f.landmarks is not None]
        if not faces:
            skipped += 1
            continue
        face = max(faces, key=lambda f: f.area)
        crops.append(label_photo(pixels, face.keypoints, face.landmarks))
        names.append(Path(path).name)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part.npz")
    np.savez_compressed(tmp, images=np.stack([c.image for c in crops]), valid=np.stack([c.valid for c in crops]),
                        labels=np.stack([c.labels for c in crops]), mesh=np.stack([c.mesh for c in crops]),
                        names=np.array(names))
    tmp.replace(out)
    return {"labelled": len(crops), "skipped": skipped}


@dataclass(frozen=True)
class LabelSet:
    images: np.ndarray
    valid: np.ndarray
    labels: np.ndarray
    mesh: np.ndarray
    names: np.ndarray

    def __len__(self) -> int:
        return len(self.images)

    def subset(self, keep: np.ndarray) -> LabelSet:
        return LabelSet(self.images[keep], self.valid[keep], self.labels[keep], self.mesh[keep], self.names[keep])


def load_cache(path: Path) -> LabelSet:
    with np.load(path) as data:
        return LabelSet(data["images"], data["valid"], data["labels"], data["mesh"], data["names"])
