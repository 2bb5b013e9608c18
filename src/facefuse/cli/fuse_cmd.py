"""`facefuse fuse`: source identity and face shape onto the target's pose, expression and scene."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from pydantic import BaseModel

from ..fusion.engine import FusionOptions
from ..fusion.swappers import SwapperFiles
from ..imageio import OUTPUTS, format_for_path, output_format
from ..pipeline import MAX_SOURCE_PHOTOS, EncodeOptions, Fuser, FuserConfig
from .options import add_fuser_options, add_model_flags, fuser_config, model_from_args


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("fuse", help="fuse a source face into a target photo",
                                 description="Fuse the source photo's face into the target photo. Every option of "
                                             "the library's FusionOptions is a flag here.")
    add_fusion_flags(parser, "photo giving pose, expression, hair and scene",
                     f"where to write the result ({', '.join('.' + f.extension for f in OUTPUTS)})", (EncodeOptions, "output"))
    parser.set_defaults(handler=run)


def add_fusion_flags(parser: argparse.ArgumentParser, target_help: str, output_help: str,
                     *models: tuple[type[BaseModel], str]) -> None:
    """The flags every fusing command has (shared with ``facefuse video``): inputs, output, ``--json``, every
    ``FusionOptions`` field, those of ``models``, the swapper files and the runtime."""
    add_source_flag(parser)
    parser.add_argument("--target", required=True, help=target_help)
    parser.add_argument("--output", required=True, help=output_help)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_model_flags(parser, FusionOptions, "fusion options")
    for model, title in models:
        add_model_flags(parser, model, title)
    add_swapper_flags(parser)
    add_fuser_options(parser)


def add_source_flag(parser: argparse.ArgumentParser) -> None:
    """``--source``, repeatable: several photos of the same person (shared with ``batch`` and ``video``)."""
    parser.add_argument("--source", required=True, action="append", type=Path,
                        help="photo giving the identity and face shape; repeat it (up to "
                             f"{MAX_SOURCE_PHOTOS}) for photos of the same person turned different ways: each face "
                             "is fused from the one turned most like it (in a video, most like it at its first "
                             "frame, kept while it is followed)")


def sources_from_args(args: argparse.Namespace) -> Path | list[Path]:
    """The ``--source`` photo, or the list when it was given several times (:meth:`Fuser.prepare`)."""
    return args.source[0] if len(args.source) == 1 else list(args.source)


def add_swapper_flags(parser: argparse.ArgumentParser) -> None:
    """``--model-path`` / ``--allow-unknown-model``."""
    swapper = parser.add_argument_group("swapper files")
    swapper.add_argument("--model-path", type=Path, default=None,
                         help="a local ONNX file for a swapper --engine instead of the registry's download")
    swapper.add_argument("--allow-unknown-model", action="store_true",
                         help="accept a --model-path whose SHA-256 is not the published file's")


def config_with_swapper(args: argparse.Namespace) -> FuserConfig:
    config = fuser_config(args)
    if args.model_path is not None:
        config = replace(config, swapper_files=SwapperFiles(args.model_path, allow_unknown=args.allow_unknown_model))
    return config


def run(args: argparse.Namespace) -> int:
    options: FusionOptions = model_from_args(FusionOptions, args)
    encoding: EncodeOptions = model_from_args(EncodeOptions, args)
    fmt = output_format(encoding.output_format) if encoding.output_format else format_for_path(args.output)
    result = Fuser(config_with_swapper(args)).fuse(sources_from_args(args), Path(args.target), options)
    Path(args.output).write_bytes(result.encode(fmt, encoding.quality))
    if args.json:
        print(json.dumps({"output": args.output, **result.to_dict()}))
    else:
        faces = ", ".join(f"face {f['index']} at {[round(v) for v in f['box']]}"
                          + (f" from source photo {f['source_photo'] + 1}" if len(args.source) > 1 else "")
                          for f in result.faces)
        print(f"wrote {args.output} ({faces}) in {result.timings_ms['total']:.0f} ms")
        for warning in result.warnings:
            print(f"warning: {warning}")
    return 0
