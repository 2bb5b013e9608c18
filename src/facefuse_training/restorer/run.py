"""The whole chain in order — teacher, iterative pruning, distillation (and its no-teacher ablation), ONNX export
with parity check, hold-out report, model card. Every stage leaves a file in ``config.out`` and is skipped when
that file exists, so an interrupted run picks up where it stopped."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
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


def run(config: RestorerConfig, until: str = "export", onnx_name: str = "restorer.onnx") -> dict:
    """Run the stages up to and including ``until``; return the summary (also written to ``summary.json``)."""
    limit_threads(config.threads)
    cv2.setNumThreads(config.threads)  # the degradations' OpenCV calls: no spinning workers on a busy machine
    config.out.mkdir(parents=True, exist_ok=True)
    trained = all((config.out / f"{name}.pt").is_file() for name in ("teacher", "pruned", "pruned_ft", "student"))
    images = np.empty((0, config.size, config.size, 3), np.uint8) if trained else training_images(config)
    teacher = train_teacher(config, images)
    if until == "teacher":
        return {"teacher": str(teacher)}
    pruned = prune_and_finetune(config, teacher, images)
    if until == "prune":
        return {"pruned": str(pruned)}
    student = finetune_student(config, pruned, teacher, images)
    if until == "distil":
        return {"student": str(student)}
    finetune_student(config, pruned, None, images)  # the no-teacher ablation (independent: may run in parallel)
    return export_and_report(config, onnx_name)


def stage_seconds(log: Path, max_gap_s: float = 300.0) -> dict[str, float]:
    """Wall-clock training time per stage from the log's timestamps; pauses longer than ``max_gap_s`` (a stopped
    and resumed run) are not counted."""
    last: dict[str, float] = {}
    total: dict[str, float] = {}
    for line in log.read_text().splitlines() if log.is_file() else []:
        record = json.loads(line)
        stage, t = record["stage"], record["time"]
        if stage in last and 0 <= t - last[stage] <= max_gap_s:
            total[stage] = total.get(stage, 0.0) + t - last[stage]
        last[stage] = t
    return total


def export_and_report(config: RestorerConfig, onnx_name: str) -> dict:
    """Export the student, check ONNX parity, evaluate every stage on the hold-out set, write the card."""
    load = lambda name: torch.load(config.out / f"{name}.pt", map_location="cpu", weights_only=False)  # noqa: E731
    models = {name: load(name) for name in ("teacher", "pruned", "pruned_ft", "student")}
    example = torch.zeros(1, 3, config.patch, config.patch)
    rng = np.random.default_rng(config.seed)
    m = config.teacher.multiple
    inputs = [rng.random((1, 3, 4 * m, 4 * m), dtype=np.float32), rng.random((2, 3, 6 * m, 10 * m), dtype=np.float32)]
    worst = 0.0
    # the student ships; the other stages are exported too, for the benchmark's teacher / pruned rows
    for name, file in (("teacher", "teacher.onnx"), ("pruned_ft", "pruned_ft.onnx"), ("student", onnx_name)):
        exported = export_onnx(models[name], config.out / file, example, multiple=m)
        parity = check_parity(models[name], exported, inputs)
        if not parity.ok(PARITY_TOLERANCE):
            raise AssertionError(f"{file}: ONNX differs from PyTorch by {parity.max_abs_diff:.2e}")
        worst = max(worst, parity.max_abs_diff)
    path = config.out / onnx_name
    pairs = holdout_pairs(holdout_images(config), config.degrade)
    costs = {name: dict(zip(("macs_256", "params"), ops_and_params(model))) for name, model in models.items()}
    summary = {
        "name": path.stem,
        "onnx": path.name, "onnx_bytes": path.stat().st_size,
        "parity_max_abs_diff": worst,
        "costs": costs,
        "holdout": holdout_report(pairs, models),
        "train_seconds": stage_seconds(config.out / "train.log.jsonl"),
    }
    (config.out / "summary.json").write_text(json.dumps(summary, indent=2))
    write_card(path.with_suffix(".md"), config, summary)
    return summary
