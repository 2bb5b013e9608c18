"""Identity embeddings from aligned face crops: ArcFace (the swappers' source identity) and MobileFaceNet.

Each recognizer is fixed by the crop and pixel normalisation it was trained with; the raw (un-normalised)
embedding is returned because some consumers (GHOST's converter) need it as is, while others L2-normalise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

from .templates import IMAGENET, SYMMETRIC, PixelNorm, aligned_crop


@dataclass(frozen=True)
class RecognizerSpec:
    template: str
    size: int
    norm: PixelNorm


RECOGNIZERS: dict[str, RecognizerSpec] = {
    "arcface_w600k_r50": RecognizerSpec("arcface-112", 112, SYMMETRIC),
    "mobilefacenet": RecognizerSpec("arcface-112", 112, IMAGENET),
}


def l2_normalise(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)


class Recognizer:
    """One embedding model; batches all faces in one run when the graph's batch axis is dynamic."""

    def __init__(self, session: ort.InferenceSession, spec: RecognizerSpec) -> None:
        self.session = session
        self.spec = spec
        first = session.get_inputs()[0]
        self.input_name = first.name
        self.fixed_batch = isinstance(first.shape[0], int)

    def crop(self, image: np.ndarray, keypoints: np.ndarray) -> np.ndarray:
        return aligned_crop(image, keypoints, self.spec.template, self.spec.size)[0]

    def embed_crops(self, crops: np.ndarray) -> np.ndarray:
        """(N, size, size, 3) RGB aligned crops → (N, D) raw embeddings."""
        tensor = self.spec.norm.to_tensor(crops)
        if not self.fixed_batch:
            return self.session.run(None, {self.input_name: tensor})[0].reshape(len(crops), -1)
        return np.concatenate([self.session.run(None, {self.input_name: t[None]})[0].reshape(1, -1)
                               for t in tensor])

    def embed(self, image: np.ndarray, keypoints: list[np.ndarray]) -> np.ndarray:
        """(N, D) raw embeddings of the faces at ``keypoints`` (each 5×2, ArcFace order)."""
        if not keypoints:
            return np.zeros((0, 0), dtype=np.float32)
        return self.embed_crops(np.stack([self.crop(image, k) for k in keypoints]))
