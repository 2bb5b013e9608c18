"""Stage 2: structured channel pruning with fine-tuning, then feature distillation from the frozen teacher.

Pruning uses torch-pruning's dependency graph, so a channel removed from an encoder block is removed from the
skip concatenation and from the decoder convolution that reads it, all in one group; the output convolution is
ignored (it must keep 3 channels). Each of ``prune_iterations`` steps removes its share (the cumulative ratio
grows linearly, as in torch-pruning's iterative schedule) and is followed by fine-tuning, which lets the network
recover before the next cut. Each step uses a fresh pruner on the current network, so a run resumed from
``pruned_K.pt`` continues exactly.

Distillation: student and teacher see the same batch; 1×1 adapters map each student stage (bottleneck and
decoder outputs) onto the teacher's channel count. loss = L1(student, GT) + SSIM term + λ·L1(student, teacher)
+ λf·Σ MSE(adapter(student stage), teacher stage). The adapters exist only during training.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch_pruning as tp
from torch import nn

from ..common.loop import train_loop
from ..common.seeding import seed_everything
from .config import RestorerConfig
from .losses import restoration_loss
from .model import UNet, stage_widths
from .teacher import loop_spec, sampler


def ops_and_params(model: nn.Module, size: int = 256) -> tuple[int, int]:
    """(multiply-accumulates, parameters) for one ``size``×``size`` image (torch-pruning's counter)."""
    macs, params = tp.utils.count_ops_and_params(model, torch.zeros(1, 3, size, size))
    return int(macs), int(params)


def step_ratio(total: float, iterations: int, k: int) -> float:
    """Fraction of the *current* channels to remove at step ``k`` (1-based) so the cumulative ratio after step k
    is ``total·k/iterations`` of the original."""
    before = 1 - total * (k - 1) / iterations
    after = 1 - total * k / iterations
    return 1 - after / before


def prune_once(model: UNet, ratio: float, example_size: int, round_to: int = 1) -> UNet:
    """Remove ``ratio`` of the channels of every prunable group, by group L2 magnitude (in place); the channel
    counts left are multiples of ``round_to``."""
    example = torch.zeros(1, 3, example_size, example_size)
    pruner = tp.pruner.BasePruner(model, example, importance=tp.importance.GroupMagnitudeImportance(p=2),
                                  pruning_ratio=ratio, ignored_layers=[model.head], iterative_steps=1,
                                  round_to=round_to if round_to > 1 else None)
    pruner.step()
    return model


def _load(path: Path) -> UNet:
    return torch.load(path, map_location="cpu", weights_only=False)


def prune_and_finetune(config: RestorerConfig, teacher_path: Path, images: np.ndarray) -> Path:
    """Iterative pruning with fine-tuning (L1 + SSIM against ground truth); the result is ``pruned.pt``."""
    final = config.out / "pruned.pt"
    if final.is_file():
        return final
    model = _load(teacher_path)
    for k in range(1, config.prune_iterations + 1):
        done = config.out / f"pruned_{k}.pt"
        if done.is_file():
            model = _load(done)
            continue
        seed_everything(config.seed + k)
        ratio = step_ratio(config.prune_ratio, config.prune_iterations, k)
        prune_once(model, ratio, config.patch, config.prune_round_to)
        model.grad_checkpoint = config.grad_checkpoint
        draw = sampler(config, images, stream=10 + k)

        def loss_at(step: int, model: UNet = model, draw=draw) -> tuple[torch.Tensor, dict]:
            lq, gt = draw(step)
            return restoration_loss(model(lq), gt, frequency_weight=config.frequency_weight)

        spec = loop_spec(config, f"prune{k}", config.finetune_steps, lr=config.lr / 2)
        train_loop({"model": model}, model.parameters(), loss_at, spec)
        model.grad_checkpoint = False
        torch.save(model, done)
    torch.save(model, final)
    return final


class Adapters(nn.Module):
    """One 1×1 convolution per stage: student width → teacher width (training only)."""

    def __init__(self, student: UNet, teacher: UNet) -> None:
        super().__init__()
        self.maps = nn.ModuleList(nn.Conv2d(s, t, 1) for s, t in zip(stage_widths(student), stage_widths(teacher)))

    def forward(self, stages: list[torch.Tensor]) -> list[torch.Tensor]:  # type: ignore[override]
        return [m(s) for m, s in zip(self.maps, stages)]


def distillation_loss(config: RestorerConfig, student: UNet, adapters: Adapters, teacher: UNet,
                      lq: torch.Tensor, gt: torch.Tensor) -> tuple[torch.Tensor, dict]:
    with torch.no_grad():
        t_out, t_stages = teacher(lq, features=True)
    s_out, s_stages = student(lq, features=True)
    base, parts = restoration_loss(s_out, gt, frequency_weight=config.frequency_weight)
    output = (s_out - t_out).abs().mean()
    feature = sum(((a - t) ** 2).mean() for a, t in zip(adapters(s_stages), t_stages))
    loss = base + config.distil_output_weight * output + config.distil_feature_weight * feature
    return loss, {**parts, "distil_out": float(output.detach()), "distil_feat": float(feature.detach())}


def finetune_student(config: RestorerConfig, pruned_path: Path, teacher_path: Path | None,
                     images: np.ndarray) -> Path:
    """The last stage from ``pruned.pt``: with a teacher, feature distillation (``student.pt``); without, the same
    number of steps against ground truth only (``pruned_ft.pt``, the ablation the benchmark compares)."""
    name = "student" if teacher_path else "pruned_ft"
    final = config.out / f"{name}.pt"
    if final.is_file():
        return final
    seed_everything(config.seed + 100)
    student = _load(pruned_path)
    student.grad_checkpoint = config.grad_checkpoint
    draw = sampler(config, images, stream=100)  # both variants see the same batches
    modules: dict[str, nn.Module] = {"student": student}
    if teacher_path:
        teacher = _load(teacher_path).eval()
        for p in teacher.parameters():
            p.requires_grad_(False)
        adapters = Adapters(student, teacher)
        modules["adapters"] = adapters

        def loss_at(step: int) -> tuple[torch.Tensor, dict]:
            lq, gt = draw(step)
            return distillation_loss(config, student, adapters, teacher, lq, gt)
    else:
        def loss_at(step: int) -> tuple[torch.Tensor, dict]:
            lq, gt = draw(step)
            return restoration_loss(student(lq), gt, frequency_weight=config.frequency_weight)

    params = [p for m in modules.values() for p in m.parameters()]
    train_loop(modules, params, loss_at, loop_spec(config, name, config.distil_steps, lr=config.lr / 2))
    student.grad_checkpoint = False
    torch.save(student, final)  # adapters are not part of the saved model
    return final
