"""The one training loop: AdamW with warm-up + cosine decay, a progress bar (loss, ETA), JSON-lines log and
resumable checkpoints.

The loop knows nothing about the model: the caller passes a ``loss_at(step)`` that draws its own batch from
:func:`~facefuse_training.common.seeding.step_rng`, so a run resumed from a checkpoint continues with exactly the
batches it would have seen.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from tqdm import tqdm

LossFn = Callable[[int], tuple[torch.Tensor, dict[str, float]]]


@dataclass(frozen=True)
class LoopSpec:
    steps: int
    lr: float = 2e-3
    weight_decay: float = 1e-4
    warmup_steps: int = 50
    min_lr_ratio: float = 0.05
    checkpoint: Path | None = None
    checkpoint_every_s: float = 120.0
    log: Path | None = None
    desc: str = "train"
    progress: bool = True


def lr_at(spec: LoopSpec, step: int) -> float:
    """Linear warm-up, then cosine decay to ``min_lr_ratio`` of the peak."""
    if step < spec.warmup_steps:
        return spec.lr * (step + 1) / spec.warmup_steps
    t = (step - spec.warmup_steps) / max(1, spec.steps - spec.warmup_steps)
    return spec.lr * (spec.min_lr_ratio + (1 - spec.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def _save(path: Path, modules: dict[str, nn.Module], optimizer: torch.optim.Optimizer, step: int) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save({"step": step, "optimizer": optimizer.state_dict(),
                "modules": {k: m.state_dict() for k, m in modules.items()}}, tmp)
    os.replace(tmp, path)  # atomic: a run killed while saving keeps the previous checkpoint


def _resume(path: Path | None, modules: dict[str, nn.Module], optimizer: torch.optim.Optimizer) -> int:
    if path is None or not path.is_file():
        return 0
    state = torch.load(path, map_location="cpu", weights_only=True)
    for key, module in modules.items():
        module.load_state_dict(state["modules"][key])
    optimizer.load_state_dict(state["optimizer"])
    return int(state["step"])


def train_loop(modules: dict[str, nn.Module], params: Iterable[nn.Parameter], loss_at: LossFn,
               spec: LoopSpec) -> list[dict[str, float]]:
    """Run ``spec.steps`` optimiser steps (continuing a checkpoint if there is one); return the logged records."""
    optimizer = torch.optim.AdamW(list(params), lr=spec.lr, weight_decay=spec.weight_decay)
    start = _resume(spec.checkpoint, modules, optimizer)
    for module in modules.values():
        module.train()
    records: list[dict[str, float]] = []
    last_save = time.monotonic()
    log = spec.log.open("a", encoding="utf-8") if spec.log else None
    bar = tqdm(range(start, spec.steps), total=spec.steps, initial=start, desc=spec.desc,
               disable=not spec.progress, mininterval=2.0, dynamic_ncols=True)
    try:
        smoothed = None
        for step in bar:
            for group in optimizer.param_groups:
                group["lr"] = lr_at(spec, step)
            loss, parts = loss_at(step)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            value = float(loss.detach())
            if not math.isfinite(value):
                raise FloatingPointError(f"{spec.desc}: loss became {value} at step {step}")
            smoothed = value if smoothed is None else 0.95 * smoothed + 0.05 * value
            bar.set_postfix(loss=f"{smoothed:.4f}", refresh=False)
            record = {"stage": spec.desc, "step": step + 1, "loss": value, **parts, "lr": lr_at(spec, step),
                      "time": time.time()}
            records.append(record)
            if log is not None and (step % 20 == 0 or step + 1 == spec.steps):
                log.write(json.dumps(record) + "\n")
                log.flush()
            if spec.checkpoint and time.monotonic() - last_save > spec.checkpoint_every_s:
                _save(spec.checkpoint, modules, optimizer, step + 1)
                last_save = time.monotonic()
        if spec.checkpoint:
            _save(spec.checkpoint, modules, optimizer, spec.steps)
    finally:
        bar.close()
        if log is not None:
            log.close()
    for module in modules.values():
        module.eval()
    return records
