"""Where the training photos are, the label caches built from them, and the seeded sample stream.

Sample ``k`` of a run is a pure function of ``(seed, k)``: which photo, which scene and which occluders. So a run
resumed from a checkpoint at step ``s`` sees exactly the samples the uninterrupted run would have seen, whatever
the number of data-loading workers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

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
        paths = L.list_photos(config.shared / "train/utkface/images", config.limit, config.seed)
        L.build_cache(paths, utk, progress(paths, "labelling UTKFace") if progress else None)
    data = L.load_cache(utk)
    held = np.array([L.is_held_out(Path(str(n))) for n in data.names])
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


class SyntheticStream(Dataset):
    """Item ``k`` is synthetic sample ``k`` of the run seeded ``seed``: (image [3,S,S] float 0..1, labels [S,S]).

    Samples of the first ``crop_until`` items are random ``crop``-pixel windows of the composed 128 px sample:
    the network is fully convolutional and the face keeps its scale, so this costs nothing in what it learns
    about scale and saves ~45 % of the compute per sample on these small CPUs; the rest are whole 128 px crops
    (the contract's input), so the last steps see the borders and the whole layout.
    """

    def __init__(self, data: L.LabelSet, seed: int, scene_share: float = 0.1, crop: int = L.SIZE,
                 crop_until: int = 0) -> None:
        self.data = data
        self.seed = seed
        self.crop = crop
        self.crop_until = crop_until
        scene = np.array([v.all() for v in data.valid])
        # real scenes are few; sample them more often than their count so their backgrounds are learned
        weights = np.where(scene, scene_share / max(scene.sum(), 1), (1 - scene_share) / max((~scene).sum(), 1))
        self.weights = weights / weights.sum() if scene.any() else np.full(len(data), 1 / len(data))

    def __len__(self) -> int:
        return 1 << 40

    def __getitem__(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = np.random.default_rng((self.seed, k))
        index = int(rng.choice(len(self.data), p=self.weights))
        image, labels = compose(rng, self.data, index)
        if k < self.crop_until and self.crop < L.SIZE:
            y, x = rng.integers(0, L.SIZE - self.crop + 1, 2)
            image, labels = image[y:y + self.crop, x:x + self.crop], labels[y:y + self.crop, x:x + self.crop]
        return to_tensor(image), torch.from_numpy(labels.astype(np.int64))


def to_tensor(image: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1))).float() / 255.0


def held_out_samples(data: L.LabelSet, count: int, seed: int = 12345) -> tuple[np.ndarray, np.ndarray]:
    """The fixed held-out synthetic set: ``count`` composed samples of held-out photos (uint8 NHWC, labels)."""
    images, labels = [], []
    for k in range(count):
        rng = np.random.default_rng((seed, k))
        image, label = compose(rng, data, k % len(data))
        images.append(image)
        labels.append(label)
    return np.stack(images), np.stack(labels)
