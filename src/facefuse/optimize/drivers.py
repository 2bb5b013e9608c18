"""How each pipeline model is fed and read in the pipeline itself, so optimisation sees real inputs.

A driver runs one model the way the pipeline does — the detector letterboxes the whole photo, FaceMesh gets the
rotated region of interest, a recognizer gets the ArcFace-aligned crop, a swapper its template crop and source
identity, the segmenter the mesh engine's aligned crop at 128 px — and returns decoded outputs a quality metric can
compare (detections, 468-point meshes, embeddings, swapped face crops, class probabilities). Calibration runs a
driver on a session that records what it is fed; the quality report runs it on the FP32 and on the optimised session
and compares.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..analysis.detectors import DETECTORS
from ..analysis.landmarks import FaceMesh, roi_from_mesh
from ..analysis.segmentation import SEGMENTER_MODEL, FaceSegmenter
from ..analysis.types import Face
from ..errors import ErrorCode, FacefuseError
from ..fusion.engine import FusionOptions, SourceFace
from ..fusion.mesh_engine import MeshFusionEngine
from ..fusion.occlusion import segmenter_crop
from ..geometry.align import aligned_crop
from ..fusion.recognizer import RECOGNIZERS, Recognizer
from ..fusion.swappers import SWAPPERS, SwapperEngine, SwapperFiles, make_swapper
from ..models import ModelStore, Task
from ..fusion.restorer import RESTORER, Restorer
from ..runtime import Runtime


@dataclass(frozen=True)
class Sample:
    """One held-out or calibration photo with the faces the FP32 pipeline found in it."""

    name: str
    image: np.ndarray
    faces: list[Face]


# (session, sample) -> decoded outputs of that model for that photo
Driver = Callable[[Any, Sample], Any]


@dataclass(frozen=True)
class ModelKind:
    """The task decides the quality metric; the driver decides the inputs."""

    task: Task
    driver: Driver
    detection_threshold: float = 0.0


def _detector_driver(model: str, threshold: float) -> Driver:
    build = next(builder for _, (name, builder) in DETECTORS.items() if name == model)
    return lambda session, sample: build(session, threshold).detect(sample.image)


def _mesh_driver(session: Any, sample: Sample) -> list[np.ndarray]:
    rois = [roi_from_mesh(face.landmarks) for face in sample.faces if face.landmarks is not None]
    return [points for points, _ in FaceMesh(session).run(sample.image, rois)]


def _recognizer_driver(model: str) -> Driver:
    spec = RECOGNIZERS[model]
    return lambda session, sample: Recognizer(session, spec).embed(sample.image, [f.keypoints for f in sample.faces])


def _restorer_driver(session: Any, sample: Sample) -> list[np.ndarray]:
    """The restore stage's source path on every face: scaled-up region, tiled when large, restored (uint8 RGB)."""
    restorer = Restorer(session)
    return [restorer.restore_source(sample.image, face)[0] for face in sample.faces]


def _segmenter_driver(session: Any, sample: Sample) -> list[np.ndarray]:
    """The segment stage's input on every face — the target's aligned crop as the mesh engine frames it, scaled to
    the segmenter's 128 px — and its class probabilities, (8, 128, 128) per face."""
    engine, options = MeshFusionEngine(), FusionOptions()
    crops = []
    for face in sample.faces:
        matrix, size = engine.crop_matrix(face, options)
        crops.append(segmenter_crop(aligned_crop(sample.image, matrix, size)))
    return list(FaceSegmenter(session).probabilities(np.stack(crops))) if crops else []


def _swapper_driver(name: str, store: ModelStore, runtime: Runtime, model_path: Path | None) -> Driver:
    """Swapped crops of every face of a photo, all with one identity: that of the first face the driver sees
    (embedded by the FP32 recognizer, so only the swapper under test differs between two runs)."""
    reference = make_swapper(name, store, runtime, SwapperFiles(model=model_path, allow_unknown=True))
    identity: list[SourceFace] = []

    def run(session: Any, sample: Sample) -> list[np.ndarray]:
        if not identity:
            identity.append(reference.prepare_source(sample.image, sample.faces[0]))
        engine = SwapperEngine(name, session, reference.recognizer, reference.converter, reference.emap)
        options = FusionOptions()
        crops = []
        for face in sample.faces:
            matrix, size = engine.crop_matrix(face, options)
            crops.append(engine.render(identity[0], aligned_crop(sample.image, matrix, size), matrix, face, options).crop)
        return crops

    return run


def model_kind(name: str, store: ModelStore, runtime: Runtime, detection_threshold: float = 0.5,
               model_path: Path | None = None) -> ModelKind:
    """The driver for a registry model; only models whose pipeline pre-processing is known can be calibrated.

    ``model_path`` is the file being optimised when it is not the registry's (swappers need it to build the
    reference engine around it)."""
    entry = store.registry.get(name)
    if name in SWAPPERS:
        return ModelKind(Task.SWAPPER, _swapper_driver(name, store, runtime, model_path))
    if entry.task is Task.DETECTOR and any(model == name for model, _ in DETECTORS.values()):
        # the optimised detector runs at a lower threshold so a score that drops shows up as drift, not a miss
        return ModelKind(Task.DETECTOR, _detector_driver(name, detection_threshold * 0.5), detection_threshold)
    if entry.task is Task.LANDMARKER and name == "facemesh":
        return ModelKind(Task.LANDMARKER, _mesh_driver)
    if entry.task is Task.RECOGNIZER and name in RECOGNIZERS:
        return ModelKind(Task.RECOGNIZER, _recognizer_driver(name))
    if entry.task is Task.ENHANCER and name == RESTORER:
        return ModelKind(Task.ENHANCER, _restorer_driver)
    if entry.task is Task.SEGMENTER and name == SEGMENTER_MODEL:
        return ModelKind(Task.SEGMENTER, _segmenter_driver)
    raise FacefuseError(ErrorCode.INVALID_OPTION, f"model '{name}' has no calibration driver",
                        "models that can be optimised: "
                        + ", ".join(sorted({m for m, _ in DETECTORS.values()} | {"facemesh", RESTORER, SEGMENTER_MODEL}
                                           | set(RECOGNIZERS)))
                        + ", and the swappers",
                        {"model": name})
