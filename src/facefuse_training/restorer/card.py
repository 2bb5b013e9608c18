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
        f"- Degradation (GFPGAN's, scaled to {config.size} px): blur kernel {deg.kernel_size} px iso/aniso, σ "
        f"{deg.sigma_range[0]:.3f}–{deg.sigma_range[1]:.2f} px; downsample ×{deg.downsample[0]}–×{deg.downsample[1]}; "
        f"Gaussian noise σ {deg.noise[0]:.0f}–{deg.noise[1]:.0f}; JPEG {deg.jpeg[0]}–{deg.jpeg[1]}; colour jitter.",
        f"- Seed {config.seed}; steps: teacher {config.teacher_steps}, fine-tune {config.finetune_steps} per pruning "
        f"step, distillation {config.distil_steps}; batch {config.batch}.",
        "- Real training time on this machine (2 shared cores, 1 PyTorch thread, load 5–20 from other jobs): "
        + ", ".join(f"{stage} {seconds / 60:.1f} min" for stage, seconds in summary["train_seconds"].items())
        + " (wall clock from the training log).",
        "- In facefuse's restore stage the output keeps the input's colours and tones below 2 px "
        "(`facefuse.restore.keep_colours`): the colour jitter of the degradation taught the network an average "
        "colour correction that moved real faces away from their originals; its detail is what is used.",
        "",
        "## Measured (hold-out, PyTorch; `benchmarks/restorer.py` has the ONNX, INT8 and FP16 figures)",
        "",
        "```json",
        json.dumps(summary, indent=2),
        "```",
        "",
        "Limits: trained for minutes on 1–2 shared CPU cores, on 128 px faces; it sharpens and denoises mild to "
        "moderate degradation and cannot invent detail a ×8 downsample destroyed. Not for identification.",
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
