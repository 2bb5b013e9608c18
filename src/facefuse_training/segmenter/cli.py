"""`facefuse train segmenter`: arguments and entry point (loaded lazily by ``facefuse.cli.train_cmd``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from facefuse.errors import ErrorCode, FacefuseError

from .data import DataConfig, shared_root
from .run import STAGES, run_chain
from .train import TrainConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = TrainConfig(out=Path("."))
    parser.add_argument("--out", type=Path, default=Path("artifacts/segmenter"),
                        help="folder for the checkpoint, log, ONNX file and summary (resumes from it)")
    parser.add_argument("--shared", type=Path, default=None, help="the shared data folder (default ../shared)")
    parser.add_argument("--cache", type=Path, default=Path(".cache/segmenter"), help="label cache folder")
    parser.add_argument("--quick", action="store_true", help="tiny configuration for tests (well under 2 min)")
    parser.add_argument("--until", choices=STAGES, default="report", help="stop after this stage")
    parser.add_argument("--limit", type=int, default=None, help="seeded subset of UTKFace photos")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--batch", type=int, default=defaults.batch)
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--init", type=Path, default=None,
                        help="an exported face_segmenter.onnx to continue training from (a fine-tune, e.g. of the "
                             "shipped model with new synthetic occluders)")
    parser.add_argument("--warmup", type=int, default=defaults.warmup, help="warm-up steps of the learning rate")
    parser.add_argument("--occluder-weight", type=float, default=defaults.occluder_weight,
                        help="cross-entropy weight of occluder pixels (undone in the exported logits)")
    parser.add_argument("--hard-examples", action="store_true",
                        help="hard negatives labelled as face (side shadows, beards, make-up, dark brows) and thin "
                             "bars and fingers as occluders (round 4's trial: not the shipped recipe)")
    parser.add_argument("--photo-edges", type=float, default=defaults.photo_edges,
                        help="share of samples cut as a tight photo whose crop reflects the photo past its edges, "
                             "as inference's aligned crop does (0: the shipped recipe's stream)")
    parser.add_argument("--threads", type=int, default=1, help="PyTorch threads (1 is fastest on a busy machine)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (logs still written)")


def configs_from(args: argparse.Namespace) -> tuple[DataConfig, TrainConfig]:
    data = DataConfig(shared=args.shared or shared_root(), cache=args.cache, limit=args.limit, seed=args.seed)
    train = TrainConfig(out=args.out, steps=args.steps, batch=args.batch, lr=args.lr, seed=args.seed,
                        threads=args.threads, progress=not args.no_progress, init=args.init,
                        warmup=args.warmup, occluder_weight=args.occluder_weight,
                        hard_examples=args.hard_examples, photo_edges=args.photo_edges)
    if args.quick:
        data, train = quick(data, train)
    return data, train


def quick(data: DataConfig, train: TrainConfig) -> tuple[DataConfig, TrainConfig]:
    """A few photos, a narrow network and a few steps: exercises every stage for real in well under 2 min."""
    from dataclasses import replace

    return (replace(data, limit=data.limit or 40, scenes=False),
            replace(train, steps=min(train.steps, 60), batch=4, crop=64, crop_share=0.5, widths=(8, 16, 16, 32),
                    full=4, warmup=4, checkpoint_every_s=0.0))


def run(args: argparse.Namespace) -> int:
    if args.quick and args.until == "ship":
        raise FacefuseError(ErrorCode.INVALID_OPTION, "a --quick model is never shipped",
                            "train without --quick, then run with --until ship", {"until": args.until})
    data, train = configs_from(args)
    summary = run_chain(data, train, until=args.until)
    print(json.dumps(summary, indent=2))
    return 0
