"""Hold-out report: PSNR / SSIM against ground truth for the degraded input, a bicubic + unsharp-mask baseline
and each trained model, plus each model's fidelity to the teacher's output."""

from __future__ import annotations

import cv2
import numpy as np
import torch
from skimage.metrics import peak_signal_noise_ratio, structural_similarity
from torch import nn

from .data import to_tensor
from .degrade import Degraded


def bicubic(small: np.ndarray, size: int) -> np.ndarray:
    """The baseline the goals are stated against: the degraded face scaled back up, bicubic."""
    return np.clip(cv2.resize(small, (size, size), interpolation=cv2.INTER_CUBIC), 0, 1)


def bicubic_unsharp(small: np.ndarray, size: int, amount: float = 0.6, sigma: float = 1.0) -> np.ndarray:
    """The classical answer: bicubic upscaling, then an unsharp mask."""
    up = bicubic(small, size)
    return np.clip(up + amount * (up - cv2.GaussianBlur(up, (0, 0), sigma)), 0, 1)


def predict(model: nn.Module, images: list[np.ndarray], batch: int = 32) -> list[np.ndarray]:
    """Run a model on (H, W, 3) float images in [0, 1]; outputs clipped to [0, 1]."""
    out: list[np.ndarray] = []
    model.eval()
    with torch.no_grad():
        for i in range(0, len(images), batch):
            y = model(to_tensor(np.stack(images[i:i + batch]))).clamp(0, 1).numpy().transpose(0, 2, 3, 1)
            out.extend(y)
    return out


def psnr_ssim(a: list[np.ndarray], b: list[np.ndarray]) -> dict[str, float]:
    psnr = [peak_signal_noise_ratio(x, y, data_range=1.0) for x, y in zip(a, b)]
    ssim = [structural_similarity(x, y, channel_axis=-1, data_range=1.0) for x, y in zip(a, b)]
    return {"psnr_db": float(np.mean(psnr)), "ssim": float(np.mean(ssim))}


FACE_BUCKETS = ((32, 48), (48, 64), (64, 96), (96, 128), (128, 129))  # face side after reduction (px at 128)


def bucket_gains(pairs: list[Degraded], outputs: dict[str, list[np.ndarray]], size: int) -> dict[str, dict]:
    """Per face-size bucket: count, bicubic PSNR and each output's mean gain over it (dB, per image).

    Why: one mean over faces 32–128 px hides where a model helps; the small faces are what users send."""
    gt = [p.gt for p in pairs]
    base = np.array([peak_signal_noise_ratio(g, bicubic(p.small, size), data_range=1.0) for g, p in zip(gt, pairs)])
    psnr = {name: np.array([peak_signal_noise_ratio(g, y, data_range=1.0) for g, y in zip(gt, out)])
            for name, out in outputs.items()}
    sides = np.array([p.side * 128 / size for p in pairs])
    report: dict[str, dict] = {}
    for lo, hi in FACE_BUCKETS:
        inside = (sides >= lo) & (sides < hi)
        if inside.any():
            label = f"{lo}–{hi - 1} px" if hi - lo > 1 else "not reduced"
            report[label] = {"count": int(inside.sum()), "bicubic_db": float(base[inside].mean()),
                             **{name: float((v[inside] - base[inside]).mean()) for name, v in psnr.items()}}
    return report


def holdout_report(pairs: list[Degraded], models: dict[str, nn.Module], teacher: str = "teacher") -> dict:
    """{"degraded input": {...}, "bicubic": {...}, "bicubic + unsharp": {...},
    name: {psnr_db, ssim, fidelity_psnr_db, ...}, "by_face_px": gains per face-size bucket}."""
    gt = [p.gt for p in pairs]
    size = gt[0].shape[0]
    report: dict[str, dict[str, float]] = {
        "degraded input": psnr_ssim([p.lq for p in pairs], gt),
        "bicubic": psnr_ssim([bicubic(p.small, size) for p in pairs], gt),
        "bicubic + unsharp": psnr_ssim([bicubic_unsharp(p.small, size) for p in pairs], gt),
    }
    outputs = {name: predict(model, [p.lq for p in pairs]) for name, model in models.items()}
    for name, out in outputs.items():
        report[name] = psnr_ssim(out, gt)
        if teacher in outputs and name != teacher:
            fidelity = psnr_ssim(out, outputs[teacher])
            report[name] |= {"fidelity_psnr_db": fidelity["psnr_db"], "fidelity_ssim": fidelity["ssim"]}
    report["by_face_px"] = bucket_gains(pairs, outputs, size)  # type: ignore[assignment]
    report["images"] = {"count": float(len(pairs)), "size": float(size)}
    return report
