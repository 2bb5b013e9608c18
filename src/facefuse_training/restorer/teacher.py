"""Stage 1: train the teacher U-Net on degraded UTKFace patches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..common.data import list_utkface, load_rgb
from ..common.loop import LoopSpec, train_loop
from ..common.seeding import seed_everything
from .adversarial import PatchDiscriminator, adversarial_step
from .config import RestorerConfig
from .data import PatchSampler
from .losses import restoration_loss
from .model import UNet


def training_images(config: RestorerConfig) -> np.ndarray:
    split = list_utkface(config.data_root)
    paths = split.train[: config.max_train_images] if config.max_train_images else split.train
    return load_rgb(paths, config.size)


def holdout_images(config: RestorerConfig) -> np.ndarray:
    split = list_utkface(config.data_root)
    paths = split.holdout[: config.holdout_images] if config.holdout_images else split.holdout
    return load_rgb(paths, config.size)


def sampler(config: RestorerConfig, images: np.ndarray, stream: int) -> PatchSampler:
    return PatchSampler(images=images, degrade=config.degrade, patch=config.patch, batch=config.batch,
                        seed=config.seed * 1000 + stream)


def loop_spec(config: RestorerConfig, name: str, steps: int, lr: float | None = None) -> LoopSpec:
    return LoopSpec(steps=steps, lr=lr or config.lr, warmup_steps=min(50, steps // 5),
                    checkpoint=config.out / f"{name}.ckpt", checkpoint_every_s=config.checkpoint_every_s,
                    log=config.out / "train.log.jsonl", desc=name, progress=config.progress)


def train_teacher(config: RestorerConfig, images: np.ndarray) -> Path:
    """Train (or resume) the teacher; the finished model is saved whole as ``teacher.pt``."""
    final = config.out / "teacher.pt"
    if final.is_file():
        return final
    seed_everything(config.seed)
    model = UNet(config.teacher)
    if config.teacher_init is not None:  # a continuation: the weights of an earlier teacher, a new lr schedule
        model.load_state_dict(torch.load(config.teacher_init, map_location="cpu", weights_only=False).state_dict())
    model.grad_checkpoint = config.grad_checkpoint
    draw = sampler(config, images, stream=1)
    modules: dict[str, torch.nn.Module] = {"model": model}
    adversarial = None
    if config.adversarial_weight > 0:
        disc = PatchDiscriminator()
        modules["disc"] = disc  # checkpointed with the model (its optimizer's moments restart on a resume)
        adversarial = adversarial_step(disc, torch.optim.AdamW(disc.parameters(), lr=config.disc_lr,
                                                               betas=(0.5, 0.999)))

    def loss_at(step: int) -> tuple[torch.Tensor, dict]:
        lq, gt = draw(step)
        pred = model(lq)
        loss, parts = restoration_loss(pred, gt, frequency_weight=config.frequency_weight)
        if adversarial is not None:
            g_adv, d_loss = adversarial(pred, gt)
            loss = loss + config.adversarial_weight * g_adv
            parts |= {"g_adv": float(g_adv.detach()), "d_loss": d_loss}
        return loss, parts

    train_loop(modules, model.parameters(), loss_at, loop_spec(config, "teacher", config.teacher_steps, lr=config.teacher_lr))
    model.grad_checkpoint = False
    torch.save(model, final)
    return final
