"""One frozen description of a restorer training run; ``quick()`` is the tiny configuration the tests run."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from .degrade import DegradeConfig
from .model import UNetConfig


@dataclass(frozen=True)
class RestorerConfig:
    out: Path
    data_root: Path | None = None
    seed: int = 0
    size: int = 128                     # faces are resized to size×size, degraded whole, then patched
    patch: int = 64
    batch: int = 16
    teacher: UNetConfig = field(default_factory=lambda: UNetConfig(base=24, levels=4))
    teacher_steps: int = 1500
    lr: float = 1e-3                    # pruning fine-tune and distillation run at lr / 2
    teacher_lr: float = 2e-3            # 150-step A/B on 96 hold-out faces: +0.32 dB over bicubic vs +0.28 at 1e-3
    teacher_init: Path | None = None    # start the teacher from these weights (a whole-model .pt) on a fresh schedule
    adversarial_weight: float = 0.0     # > 0: add the patch discriminator's LSGAN term to the teacher's loss
    disc_lr: float = 2e-4
    frequency_weight: float = 8.0       # Fourier-amplitude L1 (texture energy) in every pixel loss; 0 = L1 + SSIM only
    prune_ratio: float = 0.5            # fraction of channels removed from every prunable group, overall
    prune_iterations: int = 2           # pruning steps, with fine-tuning after each
    prune_round_to: int = 8             # channel counts kept multiples of this: INT8/FP32 kernels work in blocks of 8
    finetune_steps: int = 80           # per pruning step (L1 + SSIM against ground truth)
    distil_steps: int = 300
    distil_output_weight: float = 1.0   # λ: L1(student, teacher)
    distil_feature_weight: float = 1.0  # λf: Σ MSE(adapter(student feature), teacher feature)
    grad_checkpoint: bool = False
    max_train_images: int | None = None
    holdout_images: int | None = None
    threads: int = 1
    checkpoint_every_s: float = 180.0
    progress: bool = True

    @property
    def degrade(self) -> DegradeConfig:
        return DegradeConfig(size=self.size)

    def quick(self) -> "RestorerConfig":
        """A run that exercises every stage in well under two minutes on two cores."""
        return replace(self, size=64, patch=32, batch=4, teacher=UNetConfig(base=8, levels=3), teacher_steps=30,
                       prune_round_to=1,
                       finetune_steps=10, distil_steps=20, max_train_images=64, holdout_images=8,
                       checkpoint_every_s=1e9)
