"""decode: the photo's bytes (a path, a buffer) to RGB pixels, limits checked before any pixel is decoded; a photo
seen recently comes with its analysis from the content-keyed cache, and then needs no detector or landmarks."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..analysis.cache import AnalysisCache, content_key
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
            cached = self.cache.get(key) if key else None
            if cached is not None:
                return replace(record, analysis=cached, image=cached.image, cache_key=key)
            return replace(record, image=decode_image(data, self.limits).pixels, cache_key=key)
        except FacefuseError as exc:
            raise about(exc, record) from None
