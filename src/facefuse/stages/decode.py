"""decode: the photo's bytes (a path, a buffer) to RGB pixels, limits checked before any pixel is decoded; a photo
seen recently comes with its analysis from the content-keyed cache, and then needs no detector or landmarks.

A fusion's source (``Record.reducible``) that is a large photo comes at ½–⅛ scale, its longer side kept at least the
analysis copy's (:data:`~facefuse.analysis.analyzer.ANALYSIS_MAX_SIDE`): the detectors and FaceMesh see that copy
either way, and the render samples a face from a phone's 12 MP photo far below the photo's resolution. A JPEG is
decoded so (libjpeg's DCT scaling: most of the decoding skipped), other files and arrays are halved after decoding. Whether the
face it holds keeps enough pixels for the render is known only once it is found: the landmarks stage decodes it
again in full when not (:func:`lacks_detail`). A 4000 px selfie as the source: a 720p fusion 173 → 103 ms here
(``benchmarks/speed_ab.py --phone``; ``benchmarks/fusion_speed.py``'s "4000 px source" column)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..analysis.analyzer import ANALYSIS_MAX_SIDE
from ..analysis.cache import AnalysisCache, content_key, reduced_key
from ..analysis.types import ImageAnalysis, largest
from ..config import ImageLimits
from ..errors import FacefuseError
from ..fusion.engine import FusionOptions
from ..geometry.align import crop_template
from ..imageio import decode_image, read_input_bytes
from .base import Stage
from .record import Record


# a source decoded at reduced scale is kept so while the face its choice takes has there at least this many times the
# pixels the largest render crop gives a face (eye to eye, ``crop_template(crop_size)``). Why 1.25: the mesh engine
# samples a source face 2.5× its crop's size or more from a pyramid level (mesh_engine.FILTERED_FROM), so such a face
# decoded at ½ loses no detail the render would have used; a smaller one is decoded again in full
SOURCE_DETAIL = 1.25


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
            at_least = ANALYSIS_MAX_SIDE if record.reducible else None
            if isinstance(given, np.ndarray):  # arrays are not hashed: hashing megabytes costs about what it saves
                decoded = decode_image(given, self.limits, at_least)
                return replace(record, image=decoded.pixels, reduction=decoded.reduction)
            data = read_input_bytes(given, self.limits)
            key = content_key(data) if self.cache.max_bytes else None
            if key:
                # a source seen before at reduced scale (with enough detail for these options), then any photo seen
                # before in full
                for reduction in (2, 4, 8, 1) if record.reducible else (1,):
                    cached = self.cache.get(reduced_key(key, reduction))
                    if cached is not None and (reduction == 1 or not lacks_detail(cached, record.options)):
                        return replace(record, analysis=cached, image=cached.image, reduction=reduction,
                                       cache_key=reduced_key(key, reduction))
            decoded = decode_image(data, self.limits, at_least)
            return replace(record, image=decoded.pixels, reduction=decoded.reduction,
                           cache_key=key and reduced_key(key, decoded.reduction))
        except FacefuseError as exc:
            raise about(exc, record) from None


def lacks_detail(analysis: ImageAnalysis, options: FusionOptions) -> bool:
    """Whether a source decoded at reduced scale (``analysis`` made on it) must be decoded in full: the face the source
    choice takes (every face, for a choice by index) has less than :data:`SOURCE_DETAIL` × the eye distance the
    largest render crop gives a face. The eye distance is the conservative measure: a turned face's is shorter. With
    no face found the copy the detector saw is the same from a full decode, which would find no more."""
    if not analysis.faces:
        return False
    faces = [largest(analysis.faces)] if options.source_face == "largest" else analysis.faces
    eyes = min(float(np.linalg.norm(face.keypoints[0] - face.keypoints[1])) for face in faces)
    template = crop_template(options.crop_size)
    return eyes < SOURCE_DETAIL * float(np.linalg.norm(template[0] - template[1]))
