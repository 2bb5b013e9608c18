"""Calibration and held-out inputs made by the pipeline itself from a folder of photos.

Static INT8 quantisation fixes each activation's range from sample inputs; ranges measured on inputs the
pipeline never produces (random tensors, un-aligned photos) clip the real ones. So the photos go through the
FP32 analyzer once, and each model's driver is run on a session that records the tensors it is fed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import numpy as np
from onnxruntime.quantization import CalibrationDataReader

from ..analysis.analyzer import FaceAnalyzer
from ..errors import ErrorCode, FacefuseError
from ..imageio import PHOTO_SUFFIXES, decode_image
from .drivers import ModelKind, Sample



class RecordingSession:
    """Wraps an ONNX Runtime session and keeps a copy of every input feed it runs."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self.feeds: list[dict[str, np.ndarray]] = []

    def run(self, output_names: Any, feed: dict[str, np.ndarray], *args: Any) -> Any:
        self.feeds.append({name: np.array(value, copy=True) for name, value in feed.items()})
        return self._session.run(output_names, feed, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


def photo_paths(folder: Path, limit: int = 0) -> list[Path]:
    """Photos under ``folder`` (recursively) in a stable order, evenly thinned to ``limit`` when given."""
    if not folder.is_dir():
        raise FacefuseError(ErrorCode.BAD_REQUEST, f"photo folder {folder} does not exist",
                            "pass a folder of face photos", {"path": str(folder)})
    paths = sorted(p for p in folder.rglob("*") if p.suffix.lower() in PHOTO_SUFFIXES and p.is_file())
    if limit and len(paths) > limit:
        paths = [paths[i] for i in np.linspace(0, len(paths) - 1, limit).round().astype(int)]
    return paths


def load_samples(paths: list[Path], analyzer: FaceAnalyzer) -> list[Sample]:
    """Decoded photos with their FP32 faces; photos that cannot be read or hold no face are left out."""
    samples = []
    for path in paths:
        try:
            image = decode_image(path, analyzer.config.limits).pixels
        except FacefuseError:
            continue
        faces = [face for face in analyzer.analyze(image).faces if face.landmarks is not None]
        if faces:
            samples.append(Sample(path.name, image, faces))
    return samples


def record_feeds(session: Any, kind: ModelKind, samples: list[Sample]) -> list[dict[str, np.ndarray]]:
    """The exact tensors the pipeline feeds this model for these photos, one sample per feed (a batched run, such
    as FaceMesh on every face of a photo, is split along the batch axis)."""
    recorder = RecordingSession(session)
    for sample in samples:
        kind.driver(recorder, sample)
    if not recorder.feeds:
        raise FacefuseError(ErrorCode.NO_FACE, "no usable face was found in the calibration photos",
                            "use a folder of photos with clearly visible faces", {"photos": len(samples)})
    return [{name: value[i:i + 1] for name, value in feed.items()}
            for feed in recorder.feeds for i in range(len(next(iter(feed.values()))))]


class FeedReader(CalibrationDataReader):
    """Hands recorded feeds to ONNX Runtime's calibrator one at a time."""

    def __init__(self, feeds: list[dict[str, np.ndarray]]) -> None:
        self._feeds = feeds
        self._iter: Iterator[dict[str, np.ndarray]] = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._iter, None)

    def rewind(self) -> None:
        self._iter = iter(self._feeds)

    def __len__(self) -> int:
        return len(self._feeds)
