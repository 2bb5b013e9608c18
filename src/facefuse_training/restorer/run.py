"""The whole chain in order — teacher, iterative pruning, distillation (and its no-teacher ablation), ONNX export
with parity check, hold-out report, model card. Every stage leaves a file in ``config.out`` and is skipped when
that file exists, so an interrupted run picks up where it stopped."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch

from ..common.export import check_parity, export_onnx
from ..common.seeding import limit_threads
from .card import write_card
from .config import RestorerConfig
from .data import holdout_pairs
from .evaluate import holdout_report
from .student import finetune_student, ops_and_params, prune_and_finetune
from .teacher import holdout_images, train_teacher, training_images

PARITY_TOLERANCE = 1e-4
STAGES = ("teacher", "prune", "distil", "export")


def _stage_time(out: Path, name: str, started: float) -> None:
    times_path = out / "stage_seconds.json"
    times = json.loads(times_path.read_text()) if times_path.is_file() else {}
    times[name] = times.get(name, 0.0) + time.monotonic() - started
    times_path.write_text(json.dumps(times, indent=2))


def run(config: RestorerConfig, until: str = "export", onnx_name: str = "restorer.onnx") -> dict:
    """Run the stages up to and including ``until``; return the summary (also written to ``summary.json``)."""
    limit_threads(config.threads)
    config.out.mkdir(parents=True, exist_ok=True)
    images = training_images(config)
    started = time.monotonic()
    teacher = train_teacher(config, images)
    _stage_time(config.out, "teacher", started)
    if until == "teacher":
        return {"teacher": str(teacher)}
    started = time.monotonic()
    pruned = prune_and_finetune(config, teacher, images)
    _stage_time(config.out, "prune", started)
    if until == "prune":
        return {"pruned": str(pruned)}
    started = time.monotonic()
    finetune_student(config, pruned, None, images)
    student = finetune_student(config, pruned, teacher, images)
    _stage_time(config.out, "distil", started)
    if until == "distil":
        return {"student": str(student)}
    return export_and_report(config, onnx_name)


def export_and_report(config: RestorerConfig, onnx_name: str) -> dict:
    """Export the student, check ONNX parity, evaluate every stage on the hold-out set, write the card."""
    load = lambda name: torch.load(config.out / f"{name}.pt", map_location="cpu", weights_only=False)  # noqa: E731
    models = {name: load(name) for name in ("teacher", "pruned", "pruned_ft", "student")}
    path = export_onnx(models["student"], config.out / onnx_name, torch.zeros(1, 3, config.patch, config.patch))
    rng = np.random.default_rng(config.seed)
    m = config.teacher.multiple
    parity = check_parity(models["student"], path, [rng.random((1, 3, 4 * m, 4 * m), dtype=np.float32),
                                                    rng.random((2, 3, 6 * m, 10 * m), dtype=np.float32)])
    if not parity.ok(PARITY_TOLERANCE):
        raise AssertionError(f"ONNX differs from PyTorch by {parity.max_abs_diff:.2e} (> {PARITY_TOLERANCE})")
    pairs = holdout_pairs(holdout_images(config), config.degrade)
    costs = {name: dict(zip(("macs_256", "params"), ops_and_params(model))) for name, model in models.items()}
    times_path = config.out / "stage_seconds.json"
    summary = {
        "name": path.stem,
        "onnx": str(path), "onnx_bytes": path.stat().st_size,
        "parity_max_abs_diff": parity.max_abs_diff,
        "costs": costs,
        "holdout": holdout_report(pairs, models),
        "train_seconds": json.loads(times_path.read_text()) if times_path.is_file() else {},
    }
    (config.out / "summary.json").write_text(json.dumps(summary, indent=2))
    write_card(path.with_suffix(".md"), config, summary)
    return summary
