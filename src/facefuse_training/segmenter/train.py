"""Seeded, resumable training of the face segmenter, its ONNX export and the parity check.

A run lives in one folder: ``checkpoint.pt`` (model, optimiser, schedule, step; written atomically every
``checkpoint_every`` steps and at the end), ``log.jsonl`` (one line per logged step) and ``face_segmenter.onnx``.
Starting a run whose folder holds a checkpoint continues it: with the per-sample seeding of
:class:`~.data.SyntheticStream` and a seeded model, the resumed run takes exactly the steps the uninterrupted one
would have taken.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader

from .data import SyntheticStream
from .labels import IGNORE, LabelSet
from .model import NUM_CLASSES, FaceSegmenter, parameter_count

INPUT_NAME, OUTPUT_NAME = "image", "logits"


@dataclass(frozen=True)
class TrainConfig:
    out: Path
    steps: int = 1000
    batch: int = 16
    lr: float = 3e-3
    weight_decay: float = 1e-4
    warmup: int = 50
    crop: int = 96  # training window of the first crop_share of the steps (see SyntheticStream)
    crop_share: float = 0.75
    seed: int = 0
    widths: tuple[int, int, int, int] = (16, 32, 64, 128)
    full: int = 8
    checkpoint_every: int = 50
    log_every: int = 10
    workers: int = 1
    threads: int = 2
    dice_weight: float = 0.5

    def model(self) -> FaceSegmenter:
        return FaceSegmenter(self.widths, self.full)


def loss_fn(logits: torch.Tensor, labels: torch.Tensor, dice_weight: float) -> torch.Tensor:
    """Cross-entropy plus a soft Dice term (Dice pushes the IoU of small classes: eyes, brows, frames)."""
    ce = F.cross_entropy(logits, labels, ignore_index=IGNORE)
    if dice_weight == 0:
        return ce
    known = (labels != IGNORE).unsqueeze(1).float()
    target = F.one_hot(labels.clamp(max=NUM_CLASSES - 1), NUM_CLASSES).permute(0, 3, 1, 2).float() * known
    prob = logits.softmax(1) * known
    inter = (prob * target).sum((0, 2, 3))
    total = prob.sum((0, 2, 3)) + target.sum((0, 2, 3))
    present = target.sum((0, 2, 3)) > 0
    dice = 1 - (2 * inter + 1) / (total + 1)
    return ce + dice_weight * dice[present].mean()


def schedule(config: TrainConfig) -> Callable[[int], float]:
    """Linear warm-up then cosine decay to 2 % of the peak."""

    def factor(step: int) -> float:
        if step < config.warmup:
            return (step + 1) / config.warmup
        progress = (step - config.warmup) / max(1, config.steps - config.warmup)
        return 0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return factor


def _save_atomic(obj: object, path: Path) -> None:
    tmp = path.with_name(path.name + ".part")
    torch.save(obj, tmp)
    tmp.replace(path)


def train(config: TrainConfig, data: LabelSet, progress: Callable | None = None,
          stop_after: int | None = None) -> dict[str, float]:
    """Train (or continue) the run in ``config.out``; ``stop_after`` ends early at that step (tests, resume)."""
    torch.set_num_threads(config.threads)
    config.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(config.seed)
    model = config.model()
    optimiser = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimiser, schedule(config))
    checkpoint = config.out / "checkpoint.pt"
    step, seconds = 0, 0.0
    if checkpoint.is_file():
        state = torch.load(checkpoint, weights_only=False)
        model.load_state_dict(state["model"])
        optimiser.load_state_dict(state["optimiser"])
        scheduler.load_state_dict(state["scheduler"])
        step, seconds = state["step"], state["seconds"]
    end = min(config.steps, stop_after) if stop_after is not None else config.steps
    stream = SyntheticStream(data, config.seed, crop=config.crop,
                             crop_until=int(config.steps * config.crop_share) * config.batch)
    loader = DataLoader(stream, batch_size=config.batch, sampler=range(step * config.batch, end * config.batch),
                        num_workers=config.workers, persistent_workers=False)
    model.train()
    bar = progress(total=config.steps, initial=step, desc="segmenter") if progress else None
    log = open(config.out / "log.jsonl", "a")
    last: dict[str, float] = {"step": step}
    started = time.perf_counter()
    running = 0.0
    try:
        for images, labels in loader:
            loss = loss_fn(model(images), labels, config.dice_weight)
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            scheduler.step()
            step += 1
            running = loss.item() if running == 0 else 0.9 * running + 0.1 * loss.item()
            last = {"step": step, "loss": round(loss.item(), 5), "smoothed": round(running, 5),
                    "lr": round(scheduler.get_last_lr()[0], 6),
                    "seconds": round(seconds + time.perf_counter() - started, 1)}
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{running:.3f}")
            if step % config.log_every == 0 or step == end:
                log.write(json.dumps(last) + "\n")
                log.flush()
            if step % config.checkpoint_every == 0 or step == end:
                _save_atomic({"model": model.state_dict(), "optimiser": optimiser.state_dict(),
                              "scheduler": scheduler.state_dict(), "step": step, "seconds": last["seconds"],
                              "config": {k: str(v) for k, v in asdict(config).items()}}, checkpoint)
    finally:
        log.close()
        if bar is not None:
            bar.close()
    return last


def load_model(config: TrainConfig) -> FaceSegmenter:
    model = config.model()
    model.load_state_dict(torch.load(config.out / "checkpoint.pt", weights_only=False)["model"])
    return model.eval()


def export_onnx(model: FaceSegmenter, path: Path) -> dict[str, float]:
    """ONNX with a dynamic batch axis (batch norm folded by the exporter), then a parity check in ONNX Runtime."""
    import onnx
    import onnxruntime as ort

    model = model.eval()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    example = torch.rand(2, 3, 128, 128)
    torch.onnx.export(model, example, str(tmp), input_names=[INPUT_NAME], output_names=[OUTPUT_NAME],
                      dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}}, opset_version=17,
                      do_constant_folding=True, dynamo=False)
    graph = onnx.load(str(tmp))
    graph.producer_name = "facefuse_training.segmenter"
    graph.doc_string = "facefuse face segmenter: [N,3,128,128] RGB 0..1 -> [N,8,128,128] logits; non-commercial"
    onnx.save(graph, str(tmp))
    tmp.replace(path)
    return parity(model, path)


def parity(model: FaceSegmenter, path: Path, batch: int = 3) -> dict[str, float]:
    """Largest |logit| difference between PyTorch and ONNX Runtime, and label agreement, on random crops."""
    import onnxruntime as ort

    x = torch.rand(batch, 3, 128, 128, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = model.eval()(x).numpy()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {INPUT_NAME: x.numpy()})[0]
    return {"max_abs_diff": float(np.abs(got - expected).max()),
            "label_agreement": float((got.argmax(1) == expected.argmax(1)).mean()),
            "parameters": parameter_count(model), "bytes": path.stat().st_size}
