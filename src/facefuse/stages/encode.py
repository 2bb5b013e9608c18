"""encode: the result as JPEG, PNG or WebP bytes (:data:`facefuse.imageio.OUTPUTS`) with the AI-generated label in the metadata (always). A video's
frames are encoded by its own encoder (:mod:`facefuse.video.io`) instead."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from ..imageio import OUTPUT_ALIASES, OUTPUT_SPELLINGS, OUTPUTS, encode_image
from ..schema import Options, option
from .base import Stage
from .record import Record


class EncodeOptions(Options):
    """How a result is written: derived into ``facefuse fuse --output-format/--quality`` and the HTTP fields."""

    output_format: Literal[OUTPUT_SPELLINGS] | None = option(  # type: ignore[valid-type]
        None, "Format", "image format of the result (default: from the output file's name, or the Accept header; "
        f"else {OUTPUTS[0].name})", aliases=OUTPUT_ALIASES)
    quality: int = option(92, "Quality", "1–100: JPEG/WebP quality", ge=1, le=100)


@dataclass(frozen=True)
class Encoding:
    """The resolved encoding of one result: a format name (see :func:`facefuse.imageio.output_format`) and quality."""

    fmt: str
    quality: int = 92


@dataclass(frozen=True, eq=False)
class Encode(Stage):
    name = "encode"

    def wanted(self, record: Record) -> bool:
        return record.encode is not None

    def __call__(self, record: Record) -> Record:
        assert record.image is not None and record.encode is not None
        return replace(record, encoded=encode_image(record.image, record.encode.fmt, record.encode.quality))
