"""Face analysis: detect (with rotation and margin retries) → 468 landmarks → pose; the work of the detect and
landmarks stages (:mod:`facefuse.stages`).

Why the retries: phones store sideways photos without EXIF often enough, and tightly cropped portraits (ID photos,
aligned datasets) leave BlazeFace no margin. Each retry costs one detector run (a few ms) and only happens when
the plain pass finds no face confident enough for the quality gate.
"""

from __future__ import annotations

from dataclasses import dataclass

import time

import cv2
import numpy as np

from ..config import AnalysisConfig
from ..models import ModelStore
from ..runtime import Runtime
from .blazeface import area_resize
from .detectors import make_detector
from .landmarks import FaceMesh, Roi, five_points, roi_from_eyes, roi_from_mesh
from .nms import Detection
from .pose import head_pose
from .quality import measure
from .types import Face, ImageAnalysis, left_to_right

_ROTATE = {90: cv2.ROTATE_90_CLOCKWISE, 180: cv2.ROTATE_180, 270: cv2.ROTATE_90_COUNTERCLOCKWISE}
MARGIN = 0.25  # fraction of each side added around tight crops
# a second FaceMesh pass runs when the mesh's region moved more than this (fraction of the side), resized by
# more than this fraction, or turned by more than this angle against the detector's region
REFINE_SHIFT = 0.05
REFINE_SCALE = 0.1
REFINE_ANGLE = np.radians(5.0)
# photos are analysed on a copy whose longer side is at most this: the detectors see 128–640 px anyway, FaceMesh
# sees 192 px, and a 25 MP photo no longer costs full-size rotated and padded copies for the retries
ANALYSIS_MAX_SIDE = 1920
# a face found only in a turned view whose head is still tilted more than this is looked for again in the view
# that turns it upright (a photo turned 180° is often first found, sideways, in the 90° view)
UPRIGHT_ROLL = 45.0


@dataclass(frozen=True)
class View:
    """A scaled, turned and/or padded copy of the image, and how to map its points back to the original."""

    rotation: int
    pad: int
    width: int  # size of the scaled (not yet turned or padded) copy
    height: int
    scale: float = 1.0  # copy pixels per original pixel

    def to_original(self, points: np.ndarray) -> np.ndarray:
        xy = points[..., :2] - self.pad
        x, y = xy[..., 0], xy[..., 1]
        w, h = self.width, self.height
        if self.rotation == 90:
            x, y = y, h - 1 - x
        elif self.rotation == 180:
            x, y = w - 1 - x, h - 1 - y
        elif self.rotation == 270:
            x, y = w - 1 - y, x
        out = points.astype(np.float64 if points.dtype == np.float64 else np.float32, copy=True)
        out[..., 0], out[..., 1] = x / self.scale, y / self.scale
        if out.shape[-1] > 2:
            out[..., 2:] = points[..., 2:] / self.scale  # depth in the same pixel units as x and y
        return out


@dataclass(frozen=True)
class Detected:
    """What the detect stage found in one photo: the analysis copy, the view the faces were found in, the boxes."""

    small: np.ndarray  # the photo reduced to ANALYSIS_MAX_SIDE
    scale: float
    view_image: np.ndarray
    view: View
    detections: list[Detection]


def analysis_copy(image: np.ndarray, max_side: int = ANALYSIS_MAX_SIDE) -> tuple[np.ndarray, float]:
    """The image reduced (area-averaged) so its longer side is at most ``max_side``, and the scale used."""
    scale = min(1.0, max_side / max(image.shape[:2]))
    if scale >= 1.0:
        return image, 1.0
    width, height = max(1, round(image.shape[1] * scale)), max(1, round(image.shape[0] * scale))
    return area_resize(image, width, height), width / image.shape[1]


def make_view(image: np.ndarray, rotation: int, pad: int, scale: float = 1.0) -> tuple[np.ndarray, View]:
    """``image`` (already scaled by ``scale``) turned clockwise by ``rotation`` and padded by ``pad``."""
    turned = cv2.rotate(image, _ROTATE[rotation]) if rotation else image
    if pad:
        turned = cv2.copyMakeBorder(turned, pad, pad, pad, pad, cv2.BORDER_CONSTANT, value=(0, 0, 0))
    return turned, View(rotation, pad, image.shape[1], image.shape[0], scale)


def needs_second_pass(first: Roi, refined: Roi) -> bool:
    """Whether the mesh's own region differs enough from the detector's to run FaceMesh again on it.

    A second pass costs one FaceMesh run (~5 ms). Measured on dlib's annotated faces: always two passes gives an
    eye-normalised error of 0.047, always one 0.051, this rule 0.048 while skipping the second pass for portraits
    (where the regions agree within 2 %) and for a third of dlib's small crowd faces.
    """
    shift = float(np.hypot(refined.cx - first.cx, refined.cy - first.cy)) / first.size
    turn = abs((refined.angle - first.angle + np.pi) % (2 * np.pi) - np.pi)
    return shift > REFINE_SHIFT or abs(refined.size / first.size - 1) > REFINE_SCALE or turn > REFINE_ANGLE


def upright_rotation(view: View, faces: list[Face]) -> int | None:
    """The view that would show the most confident face upright, when it was found in a turned view but is still
    tilted by more than :data:`UPRIGHT_ROLL` there; ``None`` when the view is right (or the photo was not turned:
    a person lying down in an upright photo is reported as found, with their roll)."""
    if not view.rotation or not faces:
        return None
    pose = max(faces, key=lambda f: f.score).pose
    if pose is None or abs(pose.roll) <= UPRIGHT_ROLL:
        return None
    rotation = int(view.rotation - 90 * round(pose.roll / 90)) % 360
    return rotation if rotation != view.rotation else None


class FaceAnalyzer:
    """Holds the detector and landmark sessions; ``analyze`` is safe to call from several threads."""

    def __init__(self, store: ModelStore, runtime: Runtime, config: AnalysisConfig | None = None) -> None:
        self.config = config or AnalysisConfig()
        self.detector = make_detector(self.config.detector, store, runtime, self.config.detect_threshold,
                                      self.config.precision)
        self.mesh = FaceMesh(runtime.session(store.ensure_precision("facemesh", self.config.precision),
                                             stage="landmarks"))

    def analyze(self, image: np.ndarray) -> ImageAnalysis:
        return self.analyze_many([image])[0]

    def find(self, image: np.ndarray) -> list[Face]:
        """The faces of one photo, detected and with landmarks, left to right (not measured by the gate)."""
        return self.landmarks([self.detect(image)])[1][0]

    def analyze_many(self, images: list[np.ndarray]) -> list[ImageAnalysis]:
        """Detect, landmarks and the quality gate's measure for photos outside the pipeline (the video tracker's
        detection rounds, calibration, benchmarks); the pipeline runs the same three as its own stages."""
        start = time.perf_counter()
        detected = [self.detect(image) for image in images]
        detect_ms = (time.perf_counter() - start) * 1000 / max(1, len(images))
        start = time.perf_counter()
        detected, faces = self.landmarks(detected)
        landmarks_ms = (time.perf_counter() - start) * 1000  # one batch for all the photos
        found = []
        for image, photo, photo_faces in zip(images, detected, faces):
            start = time.perf_counter()
            measured = tuple(measure(image, face, self.config.quality) for face in photo_faces)
            timings = {"detect": detect_ms, "landmarks": landmarks_ms, "gate": (time.perf_counter() - start) * 1000}
            found.append(ImageAnalysis(image, measured, photo.view.rotation, timings))
        return found

    def detect(self, image: np.ndarray) -> Detected:
        """The detect stage's work for one photo: the first view whose best face passes the confidence gate."""
        small, scale = analysis_copy(image)
        view_image, view, detections = self._detect(small, scale)
        return Detected(small, scale, view_image, view, detections)

    def landmarks(self, detected: list[Detected]) -> tuple[list[Detected], list[list[Face]]]:
        """The landmarks stage's work: 468 points and the pose of every detected face of several photos at once.

        Why batched: the Ray Serve deployment merges concurrent requests (``@serve.batch``), and this is where their
        photos share one FaceMesh batch. A face found in a turned view but still tilted is looked for again in the
        upright view (which may change the photo's detections). Faces come ordered left to right.
        """
        detected = list(detected)
        faces_per_image = self._faces([(d.view_image, d.view, d.detections) for d in detected])
        for index, (found, faces) in enumerate(zip(detected, faces_per_image)):
            upright = upright_rotation(found.view, faces)
            if upright is None:
                continue
            turned, turned_view = make_view(found.small, upright, 0, found.scale)  # rare: a turned photo still tilted
            detections = self.detector.detect(turned)
            if max((d.score for d in detections), default=0.0) >= self.config.quality.min_score:
                detected[index] = Detected(found.small, found.scale, turned, turned_view, detections)
                faces_per_image[index] = self._faces([(turned, turned_view, detections)])[0]
        return detected, [left_to_right(faces) for faces in faces_per_image]

    def _detect(self, image: np.ndarray, scale: float) -> tuple[np.ndarray, View, list[Detection]]:
        """The first view whose best face passes the confidence gate, else the view with the best face."""
        attempts = [(0, 0)]
        if self.config.try_rotations:
            margin = int(MARGIN * max(image.shape[:2]))
            attempts += [(0, margin), (90, 0), (270, 0), (180, 0)]
        best: tuple[float, np.ndarray, View, list[Detection]] | None = None
        for rotation, pad in attempts:
            view_image, view = make_view(image, rotation, pad, scale)
            detections = self.detector.detect(view_image)
            top = max((d.score for d in detections), default=0.0)
            if best is None or top > best[0]:
                best = (top, view_image, view, detections)
            if top >= self.config.quality.min_score:
                break
        assert best is not None
        return best[1], best[2], best[3]

    def _faces(self, detected: list[tuple[np.ndarray, View, list[Detection]]]) -> list[list[Face]]:
        """FaceMesh on every face of every photo in one batch, then once more, batched, on those whose mesh
        region disagrees with the detector's."""
        regions = []
        for view_image, _, detections in detected:
            for det in detections:
                centre = (det.box[:2] + det.box[2:]) / 2
                side = float(max(det.box[2:] - det.box[:2])) * 1.5
                regions.append((view_image, roi_from_eyes(centre, det.points[0], det.points[1], side)))
        meshes = [mesh for mesh, _ in self.mesh.run_many(regions)]
        refined = [roi_from_mesh(mesh) for mesh in meshes]
        again = [i for i, ((_, first), region) in enumerate(zip(regions, refined)) if needs_second_pass(first, region)]
        for i, (mesh, _) in zip(again, self.mesh.run_many([(regions[i][0], refined[i]) for i in again])):
            meshes[i] = mesh
        faces, first = [], 0
        for _, view, detections in detected:
            faces.append([self._face(view, det, mesh)
                          for det, mesh in zip(detections, meshes[first:first + len(detections)])])
            first += len(detections)
        return faces

    @staticmethod
    def _face(view: View, det: Detection, mesh: np.ndarray) -> Face:
        pose = head_pose(mesh)  # in the upright view, so roll is the tilt of the head, not of the file
        corners = view.to_original(np.array([[det.box[0], det.box[1]], [det.box[2], det.box[3]]]))
        lo, hi = corners.min(0), corners.max(0)
        landmarks = view.to_original(mesh)
        return Face(
            box=np.array([lo[0], lo[1], hi[0] - lo[0], hi[1] - lo[1]]),
            score=det.score,
            keypoints=five_points(landmarks),
            landmarks=landmarks,
            pose=pose,
        )
