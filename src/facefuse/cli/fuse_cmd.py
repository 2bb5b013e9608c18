"""`facefuse fuse`: source identity and face shape onto the target's pose, expression and scene."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from ..fusion.engine import FusionOptions
from ..fusion.swappers import SwapperFiles
from ..imageio import format_for_path
from ..pipeline import Fuser
from .options import add_fuser_options, fuser_config


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("fuse", help="fuse a source face into a target photo",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--source", required=True, help="photo giving the identity and face shape")
    parser.add_argument("--target", required=True, help="photo giving pose, expression, hair and scene")
    parser.add_argument("--output", required=True, help="where to write the result (.png, .jpg or .webp)")
    add_fusion_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_fuser_options(parser)
    parser.set_defaults(handler=run)


def add_fusion_arguments(parser: argparse.ArgumentParser) -> None:
    """The fusion options, shared by `fuse` and `batch`."""
    defaults = FusionOptions()
    parser.add_argument("--profile-degree", type=float, default=defaults.profile_degree,
                        help="0–100: how far the face contour moves toward the source's")
    parser.add_argument("--feature-degree", type=float, default=defaults.feature_degree,
                        help="0–100: how much of the source's features and skin replaces the target's")
    parser.add_argument("--target-face", default="largest", help="largest, all, or an index counted left to right")
    parser.add_argument("--source-face", default="largest", help="largest, or an index counted left to right")
    parser.add_argument("--engine", default=defaults.engine, help="fusion engine (see `facefuse models list`)")
    parser.add_argument("--model-path", type=Path, default=None,
                        help="a local ONNX file for a swapper --engine instead of the registry's download")
    parser.add_argument("--allow-unknown-model", action="store_true",
                        help="accept a --model-path whose SHA-256 is not the published file's")
    parser.add_argument("--quality", type=int, default=92, help="JPEG/WebP quality")
    parser.add_argument("--no-visible-label", action="store_true",
                        help="omit the visible 'AI-generated' mark (the metadata label is always written)")


def fusion_options(args: argparse.Namespace) -> FusionOptions:
    return FusionOptions(profile_degree=args.profile_degree, feature_degree=args.feature_degree,
                         target_face=args.target_face, source_face=args.source_face, engine=args.engine,
                         visible_label=not args.no_visible_label)


def fusion_fuser(args: argparse.Namespace) -> Fuser:
    """The Fuser for the command's flags, with a local swapper file when --model-path names one."""
    config = fuser_config(args)
    if args.model_path is not None:
        config = replace(config, swapper_files=SwapperFiles(args.model_path, allow_unknown=args.allow_unknown_model))
    return Fuser(config)


def run(args: argparse.Namespace) -> int:
    options = fusion_options(args)
    fmt = format_for_path(args.output)
    result = fusion_fuser(args).fuse(Path(args.source), Path(args.target), options)
    Path(args.output).write_bytes(result.encode(fmt, args.quality))
    if args.json:
        print(json.dumps({"output": args.output, **result.to_dict()}))
    else:
        faces = ", ".join(f"face {f['index']} at {[round(v) for v in f['box']]}" for f in result.faces)
        print(f"wrote {args.output} ({faces}) in {result.timings_ms['total']:.0f} ms")
        for warning in result.warnings:
            print(f"warning: {warning}")
    return 0
