"""Losses that need no downloaded weights: L1, SSIM (Gaussian window, per channel) and a Fourier-amplitude term.

L1 and SSIM reward the mean of every face a degraded patch could have come from, so an L1 restorer comes out
smoother than bicubic (hold-out texture 0.24x the truth's, bicubic 0.44x). The amplitude of a patch's spectrum
does not care where a pore or a hair sits, only how much fine energy there is at each frequency (Fuoli, Van Gool
& Timofte, "Fourier space losses for efficient perceptual image super-resolution", ICCV 2021): matching it asks
for texture without asking for the impossible exact phase.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

_C1, _C2 = 0.01 ** 2, 0.03 ** 2


def _gaussian(window: int = 11, sigma: float = 1.5) -> torch.Tensor:
    x = torch.arange(window, dtype=torch.float32) - window // 2
    g = torch.exp(-x * x / (2 * sigma * sigma))
    return g / g.sum()


def ssim(a: torch.Tensor, b: torch.Tensor, window: int = 11) -> torch.Tensor:
    """Mean SSIM of two (N, C, H, W) batches in [0, 1] (valid region, separable Gaussian window)."""
    g = _gaussian(window).to(a)
    channels = a.shape[1]
    gx = g.view(1, 1, 1, -1).repeat(channels, 1, 1, 1)
    gy = g.view(1, 1, -1, 1).repeat(channels, 1, 1, 1)

    def blur(t: torch.Tensor) -> torch.Tensor:
        return F.conv2d(F.conv2d(t, gx, groups=channels), gy, groups=channels)

    mu_a, mu_b = blur(a), blur(b)
    var_a = blur(a * a) - mu_a ** 2
    var_b = blur(b * b) - mu_b ** 2
    cov = blur(a * b) - mu_a * mu_b
    num = (2 * mu_a * mu_b + _C1) * (2 * cov + _C2)
    den = (mu_a ** 2 + mu_b ** 2 + _C1) * (var_a + var_b + _C2)
    return (num / den).mean()


def fourier_amplitude_l1(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Mean |(|FFT a| - |FFT b|)| of two (N, C, H, W) batches (orthonormal 2-D FFT, phase ignored)."""
    return (torch.fft.rfft2(a, norm="ortho").abs() - torch.fft.rfft2(b, norm="ortho").abs()).abs().mean()


def restoration_loss(pred: torch.Tensor, gt: torch.Tensor, ssim_weight: float = 0.3,
                     frequency_weight: float = 0.0) -> tuple[torch.Tensor, dict]:
    """L1 + ``ssim_weight``(1 - SSIM) [+ ``frequency_weight`` Fourier amplitude L1]; returns the parts for the log."""
    l1 = (pred - gt).abs().mean()
    s = ssim(pred.clamp(0, 1), gt)
    loss = l1 + ssim_weight * (1 - s)
    parts = {"l1": float(l1.detach()), "ssim": float(s.detach())}
    if frequency_weight > 0:
        amplitude = fourier_amplitude_l1(pred, gt)
        loss = loss + frequency_weight * amplitude
        parts["fft_amp"] = float(amplitude.detach())
    return loss, parts
