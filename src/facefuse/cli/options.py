"""Options shared by several commands, and how they become the library's configuration objects.

Flags of an options model (:class:`facefuse.fusion.engine.FusionOptions`, :class:`facefuse.pipeline.EncodeOptions`)
are derived from its fields by :func:`add_model_flags`; nothing about them is written out here.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from ..analysis.detectors import DETECTOR_NAMES
from ..config import AnalysisConfig, GpuOptions, ImageLimits, QualityConfig, RuntimeConfig, StoreConfig
from ..fusion.restorer import RestoreConfig
from ..pipeline import FuserConfig
from ..schema import fields_of, flag_name, flag_of, nested_of, shell_name

__all__ = ["add_fuser_options", "add_model_flags", "flag_name", "fuser_config", "model_from_args"]


def _metavar(annotation: Any) -> str:
    """``largest|all|N`` for ``Literal["largest", "all"] | int``, ``N``/``X``/``TEXT`` for plain types."""
    members = get_args(annotation) if get_origin(annotation) in (Union, UnionType) else (annotation,)
    parts: list[str] = []
    for member in members:
        while get_origin(member) is Annotated:
            member = get_args(member)[0]
        if get_origin(member) is Literal:
            parts += [str(value) for value in get_args(member)]
        elif member is not type(None):
            parts.append({int: "N", float: "X", Path: "PATH"}.get(member, "TEXT"))
    return "|".join(parts)


def _help(info: FieldInfo) -> str:
    default = info.get_default(call_default_factory=True)
    shown = "" if default is None else f" [default: {str(default).lower() if isinstance(default, bool) else default}]"
    return f"{info.description or ''}{shown}"


def add_model_flags(parser: argparse.ArgumentParser, model: type[BaseModel], title: str) -> None:
    """One flag per field of ``model``: ``--name-with-dashes``; booleans get ``--name`` / ``--no-name``.

    Values stay text (``None`` when not given) and are validated by the model itself in :func:`model_from_args`,
    so a bad flag gets the same ``INVALID_OPTION`` message as the same mistake in the library or over HTTP.
    """
    group = parser.add_argument_group(title)
    for name, info in fields_of(model).items():
        dest = shell_name(model, name)
        if info.annotation is bool:
            group.add_argument(flag_of(dest, info), dest=dest, action=argparse.BooleanOptionalAction, default=None,
                               help=_help(info))
            continue
        group.add_argument(flag_of(dest, info), dest=dest, default=None, metavar=_metavar(info.annotation),
                           help=_help(info))


def model_from_args(model: type[BaseModel], args: argparse.Namespace, **overrides: Any) -> Any:
    """An instance of ``model`` from the flags that were given (the model's defaults for the rest); a nested
    options model (``AnalysisConfig.quality``) from its own flags."""
    given = {name: getattr(args, shell_name(model, name)) for name in fields_of(model)
             if getattr(args, shell_name(model, name), None) is not None}
    nested = {name: model_from_args(sub, args) for name, sub in nested_of(model).items()}
    return model(**{**given, **nested, **overrides})


def add_fuser_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("models and runtime")
    group.add_argument("--providers", default=None,
                       help="comma-separated ONNX Runtime providers in order of preference (e.g. cuda,cpu); "
                            "default: the best installed")
    group.add_argument("--threads", type=int, default=0, help="CPU threads per model (0 = all cores)")
    group.add_argument("--no-noncommercial-models", dest="allow_noncommercial_models", action="store_const",
                       const=False, default=None,
                       help="use only permissively licensed models (also FACEFUSE_ALLOW_NONCOMMERCIAL_MODELS=0): "
                            "stages whose model is non-commercial fall back to their classic method or are refused")
    add_model_flags(parser, GpuOptions, "GPU (used only with --providers cuda, tensorrt, …)")
    add_model_flags(parser, AnalysisConfig, f"analysis (detectors: {', '.join(DETECTOR_NAMES)})")
    add_model_flags(parser, QualityConfig, "quality gate")
    add_model_flags(parser, ImageLimits, "image limits (checked before a photo is decoded)")
    add_model_flags(parser, RestoreConfig, "restorer (when restore=auto restores, and how)")


def fuser_config(args: argparse.Namespace) -> FuserConfig:
    providers = tuple(p for p in args.providers.split(",") if p) if args.providers else None
    store = StoreConfig.from_env()
    if args.allow_noncommercial_models is not None:
        store = replace(store, allow_noncommercial_models=args.allow_noncommercial_models)
    return FuserConfig(
        store=store,
        runtime=RuntimeConfig(providers=providers, intra_op_threads=args.threads,
                              gpu=model_from_args(GpuOptions, args)),
        analysis=model_from_args(AnalysisConfig, args),
        restore=model_from_args(RestoreConfig, args),
    )
