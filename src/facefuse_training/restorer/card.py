"""The model card written next to the exported ONNX file."""

from __future__ import annotations

import json
from pathlib import Path

from ..common.data import LICENCE
from .config import RestorerConfig
from .degrade import DegradeConfig


def write_card(path: Path, config: RestorerConfig, summary: dict) -> Path:
    """A Markdown card: what the model is, the data and its licence, how it was trained and how well it does."""
    deg = DegradeConfig(size=config.size)
    lines = [
        f"# {summary['name']} — face restorer (pruned + distilled U-Net student)",
        "",
        "Trained by `facefuse train restorer` (package `facefuse_training.restorer`) on this project's machines.",
        "",
        f"- **Licence: non-commercial research only** — the weights follow their training data ({LICENCE}).",
        "- Input `input`: float32 RGB in [0, 1], NCHW, dynamic batch/height/width (height and width multiples of "
        f"{config.teacher.multiple}). Output `output`: restored RGB, same shape (clip to [0, 1]).",
        f"- Architecture: U-Net, plain 3×3 conv + ReLU, {config.teacher.levels} levels, global residual; teacher "
        f"base width {config.teacher.base}, student channel-pruned by {config.prune_ratio:.0%} of every group in "
        f"{config.prune_iterations} steps, then feature-distilled.",
        f"- Data: UTKFace aligned crops resized to {config.size}×{config.size}, {config.patch}×{config.patch} "
        "patches; fixed hold-out split (5 % by file-name hash).",
        f"- Degradations covered (each drawn per face; `facefuse_training.restorer.degrade`): blur p {deg.blur_prob} "
        f"(Gaussian, iso/aniso, σ {deg.blur_sigma[0]}–{deg.blur_sigma[1]} px at 128 px); face reduced to "
        f"{deg.face_px[0]:.0f}–{deg.face_px[1]:.0f} px (area/bilinear/bicubic/nearest); noise p {deg.noise_prob} "
        f"σ {deg.noise[0]:.0f}–{deg.noise[1]:.0f}; old-photo grain p {deg.grain_prob} (half on greyscale prints); "
        f"JPEG {deg.jpeg[0]}–{deg.jpeg[1]}; back to 128 px bicubic or bilinear; no colour jitter. Outside these "
        "ranges (faces under ~32 px, blur σ > 3, scratches, torn prints) it was not trained and does little.",
        f"- Seed {config.seed}; steps: teacher {config.teacher_steps}, fine-tune {config.finetune_steps} per pruning "
        f"step, distillation {config.distil_steps}; batch {config.batch}; AdamW, warm-up + cosine, peak lr "
        f"{config.teacher_lr:g} for the teacher and {config.lr / 2:g} after it; loss L1 + 0.3·(1 − SSIM)"
        + (f" + {config.frequency_weight:g}·Fourier-amplitude L1 (texture energy, every stage)"
           if config.frequency_weight > 0 else "")
        + ", the student adds L1 to the teacher's output and MSE of 1×1-adapted decoder features to the teacher's.",
        "- Real training time on this machine (2 shared cores, 1 PyTorch thread per run): "
        + ", ".join(f"{stage} {seconds / 60:.1f} min" for stage, seconds in summary["train_seconds"].items())
        + " (wall clock from the training log). No GPU was used.",
        "- In facefuse's restore stage the output keeps the input's colours and tones below 2 px "
        "(`facefuse.fusion.restorer.keep_colours`): colour is the blend stage's job.",
        "",
        "## Measured (hold-out, PyTorch; `benchmarks/restorer.py` has the ONNX, INT8 and FP16 figures)",
        "",
        "```json",
        json.dumps(summary, indent=2),
        "```",
        "",
        "Limits: trained for about an hour on one shared CPU core, on 128 px faces; it removes JPEG blocks, noise "
        "and grain and sharpens mild to moderate blur, and cannot invent detail a 16 px face never had. "
        "Not for identification.",
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
