"""decode: the photo's bytes (a path, a buffer) to RGB pixels, limits checked before any pixel is decoded; a photo
seen recently comes with its analysis from the content-keyed cache, and then needs no detector or landmarks.

A fusion's source (``Record.reducible``) that is a large JPEG is decoded at ½–⅛ scale, its longer side kept at least
the analysis copy's (:data:`~facefuse.analysis.analyzer.ANALYSIS_MAX_SIDE`): the detectors and FaceMesh see that copy
either way, and the render samples a face from a phone's 12 MP photo far below the photo's resolution. Whether the
face it holds keeps enough pixels for the render is known only once it is found: the detect stage decodes it again
in full when not (:func:`facefuse.stages.detect.needs_full_size`). A 4000×3000 selfie as the source: ~40 ms less
per fusion (``benchmarks/fusion_speed.py``'s "12 MP source" column)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..analysis.analyzer import ANALYSIS_MAX_SIDE
from ..analysis.cache import AnalysisCache, content_key, reduced_key
from ..config import ImageLimits
from ..errors import FacefuseError
from ..imageio import decode_image, read_input_bytes
from .base import Stage
from .record import Record


def about(exc: FacefuseError, record: Record) -> FacefuseError:
    """The error naming which photo it concerns (the source or a target; a photo to detect is just "the photo")."""
    return exc.about(record.role) if record.role in ("source", "target") else exc


@dataclass(frozen=True, eq=False)
class Decode(Stage):
    name = "decode"
    limits: ImageLimits
    cache: AnalysisCache

    def wanted(self, record: Record) -> bool:
        return record.image is None

    def __call__(self, record: Record) -> Record:
        given = record.input
        assert given is not None, "a record to decode names its photo"
        try:
            if isinstance(given, np.ndarray):  # arrays are not hashed: hashing megabytes costs about what it saves
                return replace(record, image=decode_image(given, self.limits).pixels)
            data = read_input_bytes(given, self.limits)
            key = content_key(data) if self.cache.max_bytes else None
            if key:
                # a source seen before at reduced scale, then any photo seen before in full
                for reduction in (2, 4, 8, 1) if record.reducible else (1,):
                    cached = self.cache.get(reduced_key(key, reduction))
                    if cached is not None:
                        return replace(record, analysis=cached, image=cached.image, reduction=reduction,
                                       cache_key=reduced_key(key, reduction))
            decoded = decode_image(data, self.limits, ANALYSIS_MAX_SIDE if record.reducible else None)
            return replace(record, image=decoded.pixels, reduction=decoded.reduction,
                           cache_key=key and reduced_key(key, decoded.reduction))
        except FacefuseError as exc:
            raise about(exc, record) from None
