"""Where the training photos are, the label caches built from them, and the seeded sample stream.

Batch ``s`` of a run is a pure function of ``(seed, s)`` (:func:`~..common.seeding.step_rng`): which photos, which
scenes and which occluders. So a run resumed from a checkpoint at step ``s`` sees exactly the samples the
uninterrupted run would have seen.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..common.data import in_holdout, list_utkface
from . import labels as L
from .synth import compose

# Photos with real scenes around the face (the UTKFace crops have almost none); the contact-sheet photos
# (insightface/samples, facenet-pytorch, face-api-js people) are deliberately not among them.
SCENE_FOLDERS = ("faces/face_recognition/knn_examples/train", "faces/dlib-faces", "faces/insightface/inspireface/bulk")


def shared_root() -> Path:
    """``../shared`` beside the repository, or ``FACEFUSE_SHARED``."""
    env = os.environ.get("FACEFUSE_SHARED")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3].parent / "shared"


@dataclass(frozen=True)
class DataConfig:
    shared: Path
    cache: Path
    limit: int | None = None  # seeded subset of UTKFace (quick mode)
    seed: int = 0
    scenes: bool = True

    def cache_file(self, name: str) -> Path:
        return self.cache / f"{name}-{'all' if self.limit is None else self.limit}-s{self.seed}.npz"


def label_sets(config: DataConfig, progress=None) -> tuple[L.LabelSet, L.LabelSet]:
    """(train, held-out) label sets, built once and cached as compressed .npz files."""
    utk = config.cache_file("utkface")
    if not utk.is_file():
        split = list_utkface(config.shared / "train/utkface")
        paths = sorted(split.train + split.holdout)
        if config.limit is not None and config.limit < len(paths):
            picked = np.random.default_rng(config.seed).choice(len(paths), config.limit, replace=False)
            paths = [paths[i] for i in sorted(picked)]
        L.build_cache(paths, utk, progress(paths, "labelling UTKFace") if progress else None)
    data = L.load_cache(utk)
    held = np.array([in_holdout(str(n)) for n in data.names])
    train, test = data.subset(~held), data.subset(held)
    if config.scenes:
        scenes = config.cache_file("scenes")
        if not scenes.is_file():
            paths = [p for folder in SCENE_FOLDERS for p in L.list_photos(config.shared / folder)]
            L.build_cache(paths, scenes, progress(paths, "labelling scene photos") if progress else None)
        train = concat(train, L.load_cache(scenes))
    return train, test


def concat(a: L.LabelSet, b: L.LabelSet) -> L.LabelSet:
    return L.LabelSet(*(np.concatenate([x, y]) for x, y in zip(
        (a.images, a.valid, a.labels, a.mesh, a.names), (b.images, b.valid, b.labels, b.mesh, b.names))))


def batch_at(data: L.LabelSet, weights: np.ndarray, seed: int, step: int, batch: int, window: int = L.SIZE,
             hard: bool = False, photo_edges: float = 0.0):
    """Training batch of ``step``: ``batch`` composed samples, as ([B,3,W,W] float 0..1, [B,W,W] int64 labels).

    A ``window`` below 128 takes a random window of each composed sample: the network is fully convolutional and
    the face keeps its scale, so this saves ~45 % of the compute per sample on these small CPUs at no cost in
    what it learns about scale; the last steps use whole crops (the contract's input) for the borders and layout.
    """
    import torch  # here, not at the top: the benchmark reads the label caches without PyTorch

    from ..common.seeding import step_rng

    rng = step_rng(seed, step)
    images, labels = [], []
    for _ in range(batch):
        image, label = compose(rng, data, int(rng.choice(len(data), p=weights)), hard=hard, photo_edges=photo_edges)
        y, x = rng.integers(0, L.SIZE - window + 1, 2)
        images.append(to_tensor(image[y:y + window, x:x + window]))
        labels.append(torch.from_numpy(label[y:y + window, x:x + window].astype(np.int64)))
    return torch.stack(images), torch.stack(labels)


def to_tensor(image: np.ndarray):
    import torch

    return torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1))).float() / 255.0


def held_out_samples(data: L.LabelSet, count: int, seed: int = 12345, hard: bool = False,
                     photo_edges: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """The fixed held-out synthetic set: ``count`` composed samples of held-out photos (uint8 NHWC, labels);
    ``photo_edges`` 1: every one cut as a tight photo (:func:`~.synth.past_photo_edges`)."""
    images, labels = [], []
    for k in range(count):
        rng = np.random.default_rng((seed, k))
        image, label = compose(rng, data, k % len(data), hard=hard, photo_edges=photo_edges)
        images.append(image)
        labels.append(label)
    return np.stack(images), np.stack(labels)
