"""The restorer network: a U-Net of plain 3×3 convolutions + ReLU with a global residual.

Why this shape: plain 3×3 convolutions quantize to INT8 well (depthwise ones lost too much in this project's
measurements), concatenating skips keep the detail the degradation left, and the residual means the network only
learns the correction. No normalisation layers: nothing to fold, and channel pruning sees clean conv→conv groups.
Spatial size must be a multiple of ``2 ** (levels - 1)``; callers pad (see ``facefuse.fusion.restorer``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


@dataclass(frozen=True)
class UNetConfig:
    base: int = 32
    levels: int = 4

    @property
    def multiple(self) -> int:
        return 2 ** (self.levels - 1)


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU(inplace=True))


class UNet(nn.Module):
    """RGB in [0, 1] → RGB (input + predicted correction). ``features=True`` also returns the decoder stages."""

    def __init__(self, config: UNetConfig = UNetConfig()) -> None:
        super().__init__()
        widths = [config.base * 2 ** i for i in range(config.levels)]
        self.config = config
        self.grad_checkpoint = False
        self.encoders = nn.ModuleList()
        cin = 3
        for width in widths:
            self.encoders.append(_block(cin, width))
            cin = width
        self.pool = nn.MaxPool2d(2)
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.decoders = nn.ModuleList(_block(widths[i + 1] + widths[i], widths[i])
                                      for i in reversed(range(config.levels - 1)))
        self.head = nn.Conv2d(widths[0], 3, 3, padding=1)
        nn.init.zeros_(self.head.weight)  # start as the identity: the residual grows from "change nothing"
        nn.init.zeros_(self.head.bias)

    def _run(self, block: nn.Module, x: torch.Tensor) -> torch.Tensor:
        if self.grad_checkpoint and self.training:
            return checkpoint(block, x, use_reentrant=False)  # recompute activations in backward: less memory
        return block(x)

    def forward(self, x: torch.Tensor, features: bool = False):  # type: ignore[override]
        skips = []
        h = x
        for i, encoder in enumerate(self.encoders):
            h = self._run(encoder, h if i == 0 else self.pool(h))
            skips.append(h)
        stages = [h]
        for decoder, skip in zip(self.decoders, reversed(skips[:-1])):
            h = self._run(decoder, torch.cat([self.up(h), skip], dim=1))
            stages.append(h)
        out = x + self.head(h)
        return (out, stages) if features else out


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def stage_widths(model: UNet) -> list[int]:
    """Channel count of each feature stage returned by ``forward(features=True)`` (bottleneck first)."""
    widths = [model.encoders[-1][2].out_channels]
    widths += [decoder[2].out_channels for decoder in model.decoders]
    return widths
