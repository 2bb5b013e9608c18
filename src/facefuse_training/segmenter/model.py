"""The segmentation network: a small U-Net of plain 3×3 convolutions that works at half resolution.

Why this shape: the whole 128 px crop must be parsed in a few milliseconds on one CPU core, so the encoder starts
with a stride-2 convolution (64 px) and goes down to 8 px, where a 3×3 kernel sees the whole head; decoder
levels add upsampled features to their skip (a 1×1 projection, no concatenation) to keep the widths small; one
cheap full-resolution branch (one 3×3 conv of the pixels, mixed in by 1×1 convs) restores thin structures (glasses
frames, strands) in the 128 px logits. Plain
convolution + batch norm + ReLU only: batch norm folds into the convolutions at export and the graph quantizes
cleanly to INT8.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

NUM_CLASSES = 8


def conv_bn(cin: int, cout: int, stride: int = 1, kernel: int = 3, norm: bool = True) -> nn.Sequential:
    """Convolution + batch norm + ReLU; without ``norm`` the convolution has a bias instead (the batch norm as the
    export folds it: a fine-tune of an exported model starts from exactly its function)."""
    if not norm:
        return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=True), nn.ReLU(inplace=True))
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True))


class Up(nn.Module):
    """Upsample the coarser features ×2, project them to the skip's width, add, refine with one 3×3 conv."""

    def __init__(self, cin: int, cout: int, norm: bool = True) -> None:
        super().__init__()
        self.project = conv_bn(cin, cout, kernel=1, norm=norm)
        self.refine = conv_bn(cout, cout, norm=norm)

    def forward(self, coarse: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        up = F.interpolate(self.project(coarse), scale_factor=2.0, mode="bilinear", align_corners=False)
        return self.refine(up + skip)


class FaceSegmenter(nn.Module):
    """[N,3,128,128] RGB in 0..1 → [N,8,128,128] logits."""

    def __init__(self, widths: tuple[int, int, int, int] = (16, 32, 48, 96), full: int = 8, norm: bool = True) -> None:
        super().__init__()
        w1, w2, w3, w4 = widths
        self.full = conv_bn(3, full, norm=norm)
        self.stem = nn.Sequential(conv_bn(3, w1, 2, norm=norm), conv_bn(w1, w1, norm=norm))  # 64 px
        self.down2 = nn.Sequential(conv_bn(w1, w2, 2, norm=norm), conv_bn(w2, w2, norm=norm))  # 32 px
        self.down3 = nn.Sequential(conv_bn(w2, w3, 2, norm=norm), conv_bn(w3, w3, norm=norm))  # 16 px
        self.down4 = nn.Sequential(conv_bn(w3, w4, 2, norm=norm), conv_bn(w4, w4, norm=norm),
                                   conv_bn(w4, w4, norm=norm))  # 8 px
        self.up3 = Up(w4, w3, norm)
        self.up2 = Up(w3, w2, norm)
        self.up1 = Up(w2, w1, norm)
        self.head = nn.Sequential(conv_bn(w1 + full, w1, kernel=1, norm=norm), nn.Conv2d(w1, NUM_CLASSES, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        full = self.full(x)
        s1 = self.stem(x)
        s2 = self.down2(s1)
        s3 = self.down3(s2)
        s4 = self.down4(s3)
        d = self.up1(self.up2(self.up3(s4, s3), s2), s1)
        d = F.interpolate(d, scale_factor=2.0, mode="bilinear", align_corners=False)
        return self.head(torch.cat([d, full], 1))


def from_onnx(path: Path, widths: tuple[int, int, int, int], full: int) -> FaceSegmenter:
    """The network of an exported ONNX file (batch norm folded into its convolutions, so the PyTorch model has
    biased convolutions and no batch norm), to continue training it: the exporter keeps the convolutions in the
    order the forward pass runs them, which is the order of the model's own modules."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(path)).graph
    weights = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    convs = [node.input[1:3] for node in graph.node if node.op_type == "Conv"]
    model = FaceSegmenter(widths, full, norm=False)
    layers = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    if len(layers) != len(convs):
        raise ValueError(f"{path}: {len(convs)} convolutions, the network with widths {widths} has {len(layers)}")
    with torch.no_grad():
        for layer, (weight, bias) in zip(layers, convs):
            if tuple(weights[weight].shape) != tuple(layer.weight.shape):
                raise ValueError(f"{path}: convolution {weight} is {weights[weight].shape}, "
                                 f"expected {tuple(layer.weight.shape)}")
            layer.weight.copy_(torch.tensor(weights[weight]))
            layer.bias.copy_(torch.tensor(weights[bias]))
    return model


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
