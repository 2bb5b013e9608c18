"""The chain in order: label cache → training → ONNX export with parity check → held-out report.

Each stage leaves its file in ``train.out`` (checkpoint, ``face_segmenter.onnx``, ``summary.json``); the label cache
and a finished checkpoint are reused, so an interrupted run picks up where it stopped.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from tqdm import tqdm

from .card import write_card
from .data import DataConfig, label_sets
from .train import TrainConfig, calibrated, export, load_model, train

STAGES = ("labels", "train", "export", "report", "ship")
WEIGHTS = Path(__file__).resolve().parents[2] / "facefuse" / "models" / "weights"
ONNX_NAME = "face_segmenter.onnx"


def _progress(paths, desc: str):
    return tqdm(paths, desc=desc, mininterval=2.0, dynamic_ncols=True)


def run_chain(data_config: DataConfig, config: TrainConfig, until: str = "report") -> dict:
    started = time.monotonic()
    data, held_out = label_sets(data_config, _progress if config.progress else None)
    summary: dict = {"train_photos": len(data), "held_out_photos": len(held_out)}
    if until == "labels":
        return summary
    records = train(config, data)
    if records:  # steps taken in this call: mean loss of its first and last fifth
        fifth = max(1, len(records) // 5)
        summary["loss_first"] = sum(r["loss"] for r in records[:fifth]) / fifth
        summary["loss_last"] = sum(r["loss"] for r in records[-fifth:]) / fifth
    summary["train_seconds"] = _train_seconds(config)
    if until == "train":
        return summary
    path = config.out / ONNX_NAME
    summary["onnx"] = str(path)
    model = calibrated(load_model(config), config.occluder_weight)
    summary["parity_max_abs_diff"] = export(model, path)
    summary["onnx_bytes"] = path.stat().st_size
    summary["parameters"] = sum(p.numel() for p in model.parameters())
    if until in ("report", "ship"):
        from .evaluate import held_out_report

        summary["held_out"] = held_out_report(path, held_out, samples=64 if config.steps < 100 else 400)
    summary["wall_seconds_this_call"] = round(time.monotonic() - started, 1)
    (config.out / "summary.json").write_text(json.dumps(summary, indent=2))
    write_card(config.out / ONNX_NAME.replace(".onnx", ".md"), config, summary)
    if until == "ship":
        summary["shipped"] = ship(config)
    return summary


def ship(config: TrainConfig) -> dict:
    """Copy the ONNX file and its card into the package; the registry entry's SHA-256 and size are then edited by
    hand (printed here): a registry that trusted whatever file lies beside it would verify nothing."""
    from facefuse.models import sha256_of

    WEIGHTS.mkdir(parents=True, exist_ok=True)
    for name in (ONNX_NAME, ONNX_NAME.replace(".onnx", ".md")):
        shutil.copyfile(config.out / name, WEIGHTS / name)
    target = WEIGHTS / ONNX_NAME
    return {"path": str(target), "sha256": sha256_of(target), "size": target.stat().st_size}


def _train_seconds(config: TrainConfig) -> float:
    """Wall time the run spent in training steps, from its log, across resumes: a gap between two records far
    slower per step than the run's median (the process was stopped, then resumed) counts at the median rate."""
    lines = [json.loads(line) for line in (config.out / "log.jsonl").read_text().splitlines() if line.strip()]
    gaps = [(b["time"] - a["time"], b["step"] - a["step"]) for a, b in zip(lines, lines[1:]) if b["step"] > a["step"]]
    if not gaps:
        return 0.0
    rates = sorted(seconds / steps for seconds, steps in gaps)
    typical = rates[len(rates) // 2]
    return round(sum(min(seconds, 10 * typical * steps) for seconds, steps in gaps), 1)
