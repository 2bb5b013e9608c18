"""The seed recipe's adversarial term, trained here from scratch (no downloaded weights): a small patch
discriminator and least-squares GAN losses.

Why a patch discriminator: it judges local texture (each output cell sees ~22 px of a 64 px patch), which is what
an L1 + SSIM restorer smooths away; least squares rather than the log loss because it stays stable at the small
weights a fidelity-first restorer can afford. Whether it earns its place is measured (``benchmarks/
restorer_loss_ab.py``): it is off unless ``RestorerConfig.adversarial_weight`` > 0.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


class PatchDiscriminator(nn.Module):
    """RGB patch in [0, 1] → a map of real/fake scores (one per ~22 px receptive field)."""

    def __init__(self, width: int = 32) -> None:
        super().__init__()
        act = lambda: nn.LeakyReLU(0.2, inplace=True)  # noqa: E731
        self.net = nn.Sequential(
            nn.Conv2d(3, width, 4, stride=2, padding=1), act(),
            nn.Conv2d(width, 2 * width, 4, stride=2, padding=1), act(),
            nn.Conv2d(2 * width, 2 * width, 3, padding=1), act(),
            nn.Conv2d(2 * width, 1, 3, padding=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return self.net(x * 2 - 1)


def discriminator_loss(disc: nn.Module, real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
    """LSGAN: real patches toward 1, restored ones toward 0 (``fake`` must be detached)."""
    return 0.5 * ((disc(real) - 1) ** 2).mean() + 0.5 * (disc(fake) ** 2).mean()


def generator_loss(disc: nn.Module, fake: torch.Tensor) -> torch.Tensor:
    """LSGAN: the restorer is rewarded when its patches score as real."""
    return ((disc(fake) - 1) ** 2).mean()


def adversarial_step(disc: nn.Module, optimizer: torch.optim.Optimizer) -> Callable[[torch.Tensor, torch.Tensor],
                                                                                     tuple[torch.Tensor, float]]:
    """A function (pred, gt) → (generator adversarial loss, discriminator loss): one discriminator update on the
    detached prediction, then the generator's term against the updated discriminator."""

    def step(pred: torch.Tensor, gt: torch.Tensor) -> tuple[torch.Tensor, float]:
        optimizer.zero_grad(set_to_none=True)
        d_loss = discriminator_loss(disc, gt, pred.detach().clamp(0, 1))
        d_loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)  # the generator's backward will add to these; cleared next step
        return generator_loss(disc, pred.clamp(0, 1)), float(d_loss.detach())

    return step
