"""MediaPipe FaceMesh (468 points) on a rotated, square region of interest around each detected face.

The region follows MediaPipe's face_landmark_front graph: centred on the detection, turned so the eyes are level,
1.5× the box so the whole head fits. A second pass re-centres the region on the first pass's mesh, which removes
most of the error a loose detector box causes (measured: see BENCHMARKS.md, landmark error).
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

MESH_SIZE = 192

# Named FaceMesh vertices used across the project.
NOSE_TIP = 1
CHIN = 152
FOREHEAD = 10
RIGHT_EYE_OUTER, RIGHT_EYE_INNER = 33, 133  # the person's right eye: image left in a frontal photo
LEFT_EYE_INNER, LEFT_EYE_OUTER = 362, 263
MOUTH_RIGHT, MOUTH_LEFT = 61, 291
UPPER_LIP_INNER, LOWER_LIP_INNER = 13, 14
RIGHT_EYE_TOP, RIGHT_EYE_BOTTOM = 159, 145
LEFT_EYE_TOP, LEFT_EYE_BOTTOM = 386, 374
RIGHT_CHEEK_EDGE, LEFT_CHEEK_EDGE = 234, 454


@dataclass(frozen=True)
class Roi:
    """A square, rotated region: centre (x, y), side length and angle (radians, image rotation to undo)."""

    cx: float
    cy: float
    size: float
    angle: float

    def to_crop_matrix(self, out_size: int = MESH_SIZE) -> np.ndarray:
        """2×3 affine mapping image pixels into the ``out_size`` square crop."""
        scale = out_size / self.size
        cos, sin = np.cos(self.angle) * scale, np.sin(self.angle) * scale
        # rotate by -angle around the centre, then move the centre to the crop centre
        return np.array([
            [cos, sin, out_size / 2 - cos * self.cx - sin * self.cy],
            [-sin, cos, out_size / 2 + sin * self.cx - cos * self.cy],
        ], dtype=np.float64)


def roi_from_eyes(centre: np.ndarray, eye_a: np.ndarray, eye_b: np.ndarray, size: float) -> Roi:
    """``eye_a`` is the person's right eye (image left when upright); the angle levels the eye line."""
    delta = eye_b - eye_a
    return Roi(float(centre[0]), float(centre[1]), float(size), float(np.arctan2(delta[1], delta[0])))


def roi_from_mesh(mesh: np.ndarray, extent: float = 1.5) -> Roi:
    """Region around a previous mesh: same rotation rule, side = ``extent`` × the mesh's extent in the levelled
    frame."""
    eye_a = mesh[[RIGHT_EYE_OUTER, RIGHT_EYE_INNER], :2].mean(0)
    eye_b = mesh[[LEFT_EYE_INNER, LEFT_EYE_OUTER], :2].mean(0)
    angle = float(np.arctan2(eye_b[1] - eye_a[1], eye_b[0] - eye_a[0]))
    cos, sin = np.cos(angle), np.sin(angle)
    levelled = mesh[:, :2] @ np.array([[cos, -sin], [sin, cos]])
    lo, hi = levelled.min(0), levelled.max(0)
    centre_l = (lo + hi) / 2
    centre = centre_l @ np.array([[cos, sin], [-sin, cos]])
    return Roi(float(centre[0]), float(centre[1]), float(max(hi - lo) * extent), angle)


class FaceMesh:
    """Runs the 468-point model on a region and returns points in image pixels plus a face-presence score."""

    def __init__(self, session) -> None:
        self.session = session
        self.input_name = session.get_inputs()[0].name
        # caches made before the store gave FaceMesh a batch axis hold a batch-1 graph: run those face by face
        self.batched = not isinstance(session.get_inputs()[0].shape[0], int)

    def crop(self, image: np.ndarray, roi: Roi) -> tuple[np.ndarray, np.ndarray]:
        matrix = roi.to_crop_matrix()
        patch = cv2.warpAffine(image, matrix, (MESH_SIZE, MESH_SIZE), flags=cv2.INTER_LINEAR,
                               borderMode=cv2.BORDER_REPLICATE)
        return patch, matrix

    def run(self, image: np.ndarray, rois: list[Roi]) -> list[tuple[np.ndarray, float]]:
        """Points in image pixels and face presence for each region, all regions in one batch."""
        return self.run_many([(image, roi) for roi in rois])

    def run_many(self, regions: list[tuple[np.ndarray, Roi]]) -> list[tuple[np.ndarray, float]]:
        """Like :meth:`run` for regions of several images: the faces of many photos (of many requests) in one batch."""
        if not regions:
            return []
        rois = [roi for _, roi in regions]
        crops = [self.crop(image, roi) for image, roi in regions]
        tensor = np.stack([patch for patch, _ in crops]).astype(np.float32).transpose(0, 3, 1, 2) / 255.0
        if self.batched:
            raw, flags = self.session.run(None, {self.input_name: tensor})
        else:
            runs = [self.session.run(None, {self.input_name: tensor[i:i + 1]}) for i in range(len(rois))]
            raw, flags = np.concatenate([r[0] for r in runs]), np.concatenate([r[1] for r in runs])
        points = raw.reshape(len(rois), 468, 3).astype(np.float64)
        presence = 1.0 / (1.0 + np.exp(-flags.reshape(len(rois)).astype(np.float64)))
        return [(self._to_image(p, matrix), float(score)) for p, (_, matrix), score in zip(points, crops, presence)]

    @staticmethod
    def _to_image(points: np.ndarray, matrix: np.ndarray) -> np.ndarray:
        inverse = cv2.invertAffineTransform(matrix)
        xy = points[:, :2] @ inverse[:, :2].T + inverse[:, 2]
        scale = np.sqrt(abs(np.linalg.det(inverse[:, :2])))
        return np.column_stack([xy, points[:, 2] * scale])


def five_points(mesh: np.ndarray) -> np.ndarray:
    """The ArcFace-order 5 points (image-left eye, image-right eye, nose, left/right mouth corners) from a mesh.

    The person's right eye is the image-left one only for an upright face; ordering by the levelled x keeps the
    template order meaningful for rotated photos too.
    """
    right_eye = mesh[[RIGHT_EYE_OUTER, RIGHT_EYE_INNER], :2].mean(0)
    left_eye = mesh[[LEFT_EYE_INNER, LEFT_EYE_OUTER], :2].mean(0)
    return np.array([right_eye, left_eye, mesh[NOSE_TIP, :2], mesh[MOUTH_RIGHT, :2], mesh[MOUTH_LEFT, :2]])
