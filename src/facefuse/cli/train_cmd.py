"""`facefuse train MODEL`: train our own models (restorer, segmenter) with the optional ``train`` extra.

Each model's training package (``facefuse_training.<model>.cli``) adds its own arguments and runs; it is imported
only when that command runs, so the CLI — and all of inference — works without PyTorch installed.
"""

from __future__ import annotations

import argparse
import importlib
from types import ModuleType

from ..errors import ErrorCode, FacefuseError

TRAINABLE = {"restorer": "face restorer: U-Net teacher → pruned + distilled student → ONNX",
             "segmenter": "face segmenter"}


def _trainer(model: str) -> ModuleType | None:
    """The model's CLI module, or None when the ``train`` extra (PyTorch) or that trainer is not installed."""
    try:
        return importlib.import_module(f"facefuse_training.{model}.cli")
    except ImportError:
        return None


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("train", help="train our own models (needs the 'train' extra)",
                                   description=__doc__)
    models = parser.add_subparsers(dest="model", required=True)
    for model, summary in TRAINABLE.items():
        # the trainer's own parser reads the rest of the line, so `--help` lists that trainer's options
        sub = models.add_parser(model, help=summary, add_help=False, prefix_chars="\0")
        sub.add_argument("options", nargs=argparse.REMAINDER)
        sub.set_defaults(handler=_runner(model))


def _runner(model: str):
    def run(args: argparse.Namespace) -> int:
        module = _trainer(model)
        if module is None:
            raise FacefuseError(ErrorCode.INVALID_OPTION, f"training the {model} needs the 'train' extra",
                                "pip install 'facefuse[train]' (PyTorch, torch-pruning)", {"model": model})
        parser = argparse.ArgumentParser(prog=f"facefuse train {model}", description=TRAINABLE[model],
                                         formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        module.add_arguments(parser)
        return int(module.run(parser.parse_args(args.options)))
    return run
