"""Seeded, resumable training of the face segmenter on the shared loop, its ONNX export and the parity check.

A run lives in one folder: ``checkpoint.pt`` (written atomically by :func:`~..common.loop.train_loop`), ``log.jsonl``
and, after export, ``face_segmenter.onnx``. Starting a run whose folder holds a checkpoint continues it; every batch
is drawn from :func:`~..common.seeding.step_rng`, so the resumed run takes exactly the steps the uninterrupted one
would have taken.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from ..common.export import check_parity, export_onnx
from ..common.loop import LoopSpec, train_loop
from ..common.seeding import limit_threads, seed_everything
from .data import batch_at
from .labels import IGNORE, OCCLUDER, SIZE, LabelSet
from .model import NUM_CLASSES, FaceSegmenter, from_onnx

PARITY_TOLERANCE = 1e-4


@dataclass(frozen=True)
class TrainConfig:
    out: Path
    steps: int = 2600  # the shipped run: 1800 steps, then continued to 2600 (see the Makefile)
    batch: int = 16
    lr: float = 3e-3
    weight_decay: float = 1e-4
    warmup: int = 50
    crop: int = 96  # training window for the first crop_share of the steps (see data.batch_at)
    crop_share: float = 0.7
    seed: int = 0
    widths: tuple[int, int, int, int] = (16, 32, 64, 128)
    full: int = 8
    dice_weight: float = 0.5
    occluder_weight: float = 1.0  # cross-entropy weight of occluder pixels (round 4's trial: 3, not shipped)
    hard_examples: bool = False  # synth.compose's hard negatives, bars and fingers (round 4's trial, not shipped)
    photo_edges: float = 0.0  # share of samples cut as a tight photo, its reflection past the edges (synth)
    threads: int = 1
    checkpoint_every_s: float = 120.0
    progress: bool = True
    stop_at: int | None = None  # end this call at that step, as an interruption would (resume tests)
    init: Path | None = None  # an exported ONNX model to continue training (a fine-tune; its batch norm folded)

    def model(self) -> FaceSegmenter:
        if self.init is not None:  # an exported file is calibrated (see calibrated): undone for training
            return calibrated(from_onnx(self.init, self.widths, self.full), 1.0 / self.occluder_weight)
        return FaceSegmenter(self.widths, self.full)

    @property
    def checkpoint(self) -> Path:
        return self.out / "checkpoint.pt"

    def window(self, step: int) -> int:
        return self.crop if step < int(self.steps * self.crop_share) else SIZE


def loss_fn(logits: torch.Tensor, labels: torch.Tensor, dice_weight: float,
            occluder_weight: float = 1.0) -> torch.Tensor:
    """Cross-entropy plus a soft Dice term (Dice pushes the IoU of small classes: eyes, brows, frames); occluder
    pixels weigh ``occluder_weight`` in the cross-entropy: a 2 px bar across a cheek is ~1 % of a crop, and
    unweighted its loss is lost beside the skin's (round 3's fine-tunes with bars never learnt them)."""
    per_pixel = F.cross_entropy(logits, labels, ignore_index=IGNORE, reduction="none")
    weights = (labels != IGNORE).float()
    if occluder_weight != 1.0:
        weights = weights * torch.where(labels == OCCLUDER, occluder_weight, 1.0)
    ce = (per_pixel * weights).sum() / (labels != IGNORE).sum().clamp(min=1)
    if dice_weight == 0:
        return ce
    known = (labels != IGNORE).unsqueeze(1).float()
    target = F.one_hot(labels.clamp(max=NUM_CLASSES - 1), NUM_CLASSES).permute(0, 3, 1, 2).float() * known
    prob = logits.softmax(1) * known
    inter = (prob * target).sum((0, 2, 3))
    total = prob.sum((0, 2, 3)) + target.sum((0, 2, 3))
    present = target.sum((0, 2, 3)) > 0
    dice = 1 - (2 * inter + 1) / (total + 1)
    return ce + dice_weight * dice[present].mean()


def train(config: TrainConfig, data: LabelSet) -> list[dict[str, float]]:
    """Train (or continue) the run in ``config.out``; returns the loop's per-step records."""
    limit_threads(config.threads)
    config.out.mkdir(parents=True, exist_ok=True)
    seed_everything(config.seed)
    model = config.model()
    weights = sampling_weights(data)

    def loss_at(step: int) -> tuple[torch.Tensor, dict[str, float]]:
        if step == config.stop_at:
            raise Interrupted(step)
        images, labels = batch_at(data, weights, config.seed, step, config.batch, config.window(step),
                                  config.hard_examples, config.photo_edges)
        return loss_fn(model(images), labels, config.dice_weight, config.occluder_weight), {}

    spec = LoopSpec(steps=config.steps, lr=config.lr, weight_decay=config.weight_decay, warmup_steps=config.warmup,
                    checkpoint=config.checkpoint, checkpoint_every_s=config.checkpoint_every_s,
                    log=config.out / "log.jsonl", desc="segmenter", progress=config.progress)
    try:
        return train_loop({"model": model}, model.parameters(), loss_at, spec)
    except Interrupted:
        return []


class Interrupted(Exception):
    """Raised inside the loop at ``TrainConfig.stop_at``; the last checkpoint stays as an interrupted run leaves it."""


def sampling_weights(data: LabelSet, scene_share: float = 0.1) -> np.ndarray:
    """Photos with a real scene around the face are few: draw them ``scene_share`` of the time, not by count."""
    scene = np.array([v.all() for v in data.valid])
    if not scene.any() or scene.all():
        return np.full(len(data), 1 / len(data))
    weights = np.where(scene, scene_share / scene.sum(), (1 - scene_share) / (~scene).sum())
    return weights / weights.sum()


def load_model(config: TrainConfig) -> FaceSegmenter:
    model = config.model()
    state = torch.load(config.checkpoint, map_location="cpu", weights_only=True)
    model.load_state_dict(state["modules"]["model"])
    return model.eval()


def calibrated(model: FaceSegmenter, occluder_weight: float) -> FaceSegmenter:
    """The trained network with its occluder logit lowered by log(``occluder_weight``), in place.

    Weighting occluder pixels ×w in the cross-entropy moves its optimum from p to w·p / (w·p + 1 − p): every
    occluder probability comes out inflated (round 4's weighted run called much of the held-out faces occluder
    before this shift). Subtracting log w from that class's logit undoes exactly this (logit adjustment, Menon et al., ICLR 2021), so the weighted loss
    still spends its gradient on thin bars and frames while the exported probabilities mean what the segment
    stage's 0.35 floor assumes."""
    if occluder_weight != 1.0:
        with torch.no_grad():
            model.head[-1].bias[OCCLUDER] -= float(np.log(occluder_weight))
    return model


def export(model: FaceSegmenter, path: Path) -> float:
    """Write the ONNX file (dynamic batch) and return its largest |logit| difference from PyTorch."""
    export_onnx(model, path, torch.zeros(1, 3, SIZE, SIZE))
    rng = np.random.default_rng(0)
    parity = check_parity(model, path, [rng.random((1, 3, SIZE, SIZE), dtype=np.float32),
                                        rng.random((3, 3, SIZE, SIZE), dtype=np.float32)])
    if not parity.ok(PARITY_TOLERANCE):
        raise AssertionError(f"ONNX differs from PyTorch by {parity.max_abs_diff:.2e} (> {PARITY_TOLERANCE})")
    return parity.max_abs_diff
