"""`facefuse train restorer`: arguments and entry point (loaded lazily by ``facefuse.cli.train_cmd``)."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from .config import RestorerConfig
from .model import UNetConfig
from .run import STAGES, run as run_chain


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = RestorerConfig(out=Path("."))
    parser.add_argument("--out", type=Path, default=Path("artifacts/restorer"),
                        help="folder for checkpoints, stage models, the ONNX file and its card (resumes from it)")
    parser.add_argument("--data", type=Path, default=None, help="UTKFace folder (default ../shared/train/utkface)")
    parser.add_argument("--quick", action="store_true", help="tiny configuration for tests (well under 2 min)")
    parser.add_argument("--until", choices=STAGES, default="export", help="stop after this stage")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--base", type=int, default=defaults.teacher.base, help="teacher base channel width")
    parser.add_argument("--teacher-steps", type=int, default=defaults.teacher_steps,
                        help="the teacher's cosine schedule length (a resumed run may change it: the schedule follows)")
    parser.add_argument("--lr", type=float, default=defaults.teacher_lr, help="peak learning rate of the teacher")
    parser.add_argument("--teacher-init", type=Path, default=None,
                        help="start the teacher from this whole-model .pt (a continuation on a fresh schedule; "
                             "use another --seed so it draws new batches)")
    parser.add_argument("--adversarial-weight", type=float, default=defaults.adversarial_weight,
                        help="> 0: add a patch discriminator's LSGAN term (trained here) to the teacher's loss")
    parser.add_argument("--frequency-weight", type=float, default=defaults.frequency_weight,
                        help="weight of the Fourier-amplitude L1 (how much fine texture, not where) in every pixel "
                             "loss of the chain; 0 = L1 + SSIM only")
    parser.add_argument("--prune-ratio", type=float, default=defaults.prune_ratio)
    parser.add_argument("--prune-iterations", type=int, default=defaults.prune_iterations)
    parser.add_argument("--finetune-steps", type=int, default=defaults.finetune_steps)
    parser.add_argument("--distil-steps", type=int, default=defaults.distil_steps)
    parser.add_argument("--batch", type=int, default=defaults.batch)
    parser.add_argument("--patch", type=_patch_side, default=defaults.patch,
                        help=f"side of the training patches, a multiple of 8 up to the {defaults.size} px face "
                             "(the whole face)")
    parser.add_argument("--threads", type=int, default=1, help="PyTorch threads (1 is fastest on a busy machine)")
    parser.add_argument("--grad-checkpoint", action="store_true",
                        help="recompute activations in the backward pass: less memory, more time")
    parser.add_argument("--checkpoint-every-s", type=float, default=defaults.checkpoint_every_s,
                        help="seconds between resumable checkpoints")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (logs still written)")


def _patch_side(text: str) -> int:
    """A patch side the teacher's U-Net takes (a multiple of 8) inside the 128 px training faces."""
    side = int(text)
    size = RestorerConfig(out=Path(".")).size
    if not 8 <= side <= size or side % 8:
        raise argparse.ArgumentTypeError(f"{side}: a patch side is a multiple of 8 from 8 to {size}")
    return side


def config_from(args: argparse.Namespace) -> RestorerConfig:
    config = RestorerConfig(out=args.out, data_root=args.data, seed=args.seed, batch=args.batch, patch=args.patch,
                            teacher=UNetConfig(base=args.base), teacher_steps=args.teacher_steps,
                            teacher_lr=args.lr, teacher_init=args.teacher_init,
                            adversarial_weight=args.adversarial_weight,
                            frequency_weight=args.frequency_weight,
                            prune_ratio=args.prune_ratio, prune_iterations=args.prune_iterations,
                            finetune_steps=args.finetune_steps, distil_steps=args.distil_steps,
                            threads=args.threads, grad_checkpoint=args.grad_checkpoint,
                            checkpoint_every_s=args.checkpoint_every_s, progress=not args.no_progress)
    return replace(config.quick(), grad_checkpoint=args.grad_checkpoint, progress=config.progress) \
        if args.quick else config


def run(args: argparse.Namespace) -> int:
    summary = run_chain(config_from(args), until=args.until)
    print(json.dumps(summary, indent=2))
    return 0
