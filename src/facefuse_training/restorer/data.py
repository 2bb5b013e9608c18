"""Batches of (degraded, clean) patches and the fixed degraded hold-out set."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..common.seeding import step_rng
from .degrade import DegradeConfig, Degraded, degrade

HOLDOUT_SEED = 20170110  # the hold-out degradations never change between runs


@dataclass(frozen=True)
class PatchSampler:
    """Draws a batch for a step: random faces, each degraded whole, then one aligned patch (with a random flip)."""

    images: np.ndarray           # (N, size, size, 3) uint8 RGB
    degrade: DegradeConfig
    patch: int
    batch: int
    seed: int

    def __call__(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = step_rng(self.seed, step)
        lq = np.empty((self.batch, self.patch, self.patch, 3), np.float32)
        gt = np.empty_like(lq)
        limit = self.degrade.size - self.patch
        for b in range(self.batch):
            pair = degrade(self.images[rng.integers(len(self.images))], rng, self.degrade)
            y, x = (int(v) for v in rng.integers(0, limit + 1, 2))
            flip = slice(None, None, -1) if rng.random() < 0.5 else slice(None)
            lq[b] = pair.lq[y:y + self.patch, x:x + self.patch][:, flip]
            gt[b] = pair.gt[y:y + self.patch, x:x + self.patch][:, flip]
        return to_tensor(lq), to_tensor(gt)


def to_tensor(batch: np.ndarray) -> torch.Tensor:
    """(N, H, W, 3) float → contiguous (N, 3, H, W) tensor."""
    return torch.from_numpy(np.ascontiguousarray(batch.transpose(0, 3, 1, 2)))


def holdout_pairs(images: np.ndarray, config: DegradeConfig) -> list[Degraded]:
    """The same degradation of every hold-out face, every time."""
    return [degrade(img, step_rng(HOLDOUT_SEED, i), config) for i, img in enumerate(images)]
