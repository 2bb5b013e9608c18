"""UTKFace listing with a hold-out split that never changes.

The split is decided by a hash of each file name, not by shuffling, so it is the same on every machine, for every
model and after files are added: a face is in the hold-out set for the restorer and the segmenter alike.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

HOLDOUT_PERCENT = 5
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
LICENCE = "UTKFace: non-commercial research use only (Zhang, Song & Qi, CVPR 2017)"


def default_root() -> Path:
    """`FACEFUSE_UTKFACE` or the shared folder beside the repository (`../shared/train/utkface`)."""
    env = os.environ.get("FACEFUSE_UTKFACE")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[4] / "shared" / "train" / "utkface"


def in_holdout(name: str, percent: int = HOLDOUT_PERCENT) -> bool:
    """True for the fixed ``percent`` % of file names set aside for evaluation."""
    digest = hashlib.sha256(name.encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") % 100 < percent


@dataclass(frozen=True)
class Split:
    train: tuple[Path, ...]
    holdout: tuple[Path, ...]


def list_utkface(root: Path | None = None) -> Split:
    """Every aligned face under ``root/images``, split into training and hold-out file lists (sorted)."""
    folder = (root or default_root()) / "images"
    if not folder.is_dir():
        raise FileNotFoundError(f"UTKFace images not found at {folder}; set FACEFUSE_UTKFACE to the dataset folder")
    paths = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not paths:
        raise FileNotFoundError(f"no images in {folder}")
    holdout = tuple(p for p in paths if in_holdout(p.name))
    train = tuple(p for p in paths if not in_holdout(p.name))
    return Split(train=train, holdout=holdout)


def load_rgb(paths: tuple[Path, ...] | list[Path], size: int) -> np.ndarray:
    """Decode and resize images to ``size``×``size`` RGB uint8, stacked as (N, size, size, 3)."""
    out = np.empty((len(paths), size, size, 3), np.uint8)
    for i, path in enumerate(paths):
        bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
        if bgr is None:
            raise ValueError(f"cannot decode {path}")
        out[i] = cv2.resize(bgr, (size, size), interpolation=cv2.INTER_AREA)[:, :, ::-1]
    return out
