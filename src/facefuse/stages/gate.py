"""gate: the quality gate, measure and verdict together, one rule for every path (fusion, detect, video, live).

Measure: each face's sharpness and issues (:func:`facefuse.analysis.quality.measure`; faces already measured —
a video's tracked faces — keep theirs; a face the restore stage changed comes back unmeasured and is measured by
:meth:`Gate.final`, so measuring is here alone). Verdict: the chosen faces (``source_face`` /
``target_face`` / detect's ``--face``) that can be used. A face whose only issues restoring can fix (blurry, small)
passes on to the restore stage when restore is on; the restore stage hands what it restored back to
:meth:`Gate.final`, the verdict after restoring. Refused with ``all``: the face is skipped with a note, and only
when every chosen face is refused does the largest one's first issue become the error. A photo's refusal is
raised; detect and video frames keep it (``Record.refusal``) and go on with no face.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..analysis.cache import AnalysisCache
from ..analysis.quality import measure, raise_first_issue
from ..analysis.select import choose_faces
from ..analysis.types import Face, ImageAnalysis, largest
from ..config import QualityConfig
from ..errors import ErrorCode, FacefuseError
from .base import Stage
from .decode import about
from .record import Record, TargetFace

# what the restore stage can fix; a face refused for its pose or confidence stays refused
RESTORABLE = frozenset({ErrorCode.TOO_BLURRY.value, ErrorCode.FACE_TOO_SMALL.value})


@dataclass(frozen=True, eq=False)
class Gate(Stage):
    name = "gate"
    quality: QualityConfig
    cache: AnalysisCache | None = None  # where a photo's measured analysis is kept (a hit then needs no measuring)

    def measured(self, image: np.ndarray, face: Face) -> Face:
        return face if face.sharpness is not None else measure(image, face, self.quality)

    def usable(self, face: Face, restoring: bool) -> bool:
        """Whether a face goes on to the restore stage: accepted, or only restorable issues and restore on."""
        return face.accepted or (restoring and all(i.code in RESTORABLE for i in face.issues))

    def __call__(self, record: Record) -> Record:
        assert record.image is not None
        if record.role == "frame":  # the tracker chose the faces (see facefuse.video.tracking)
            faces = tuple(replace(t, face=self.measured(record.image, t.face)) for t in record.faces)
            return self.verdict(replace(record, faces=faces), restoring=_restoring(record))
        assert record.analysis is not None
        analysis = record.analysis
        faces = tuple(self.measured(record.image, f) for f in analysis.faces)
        measured = ImageAnalysis(analysis.image, faces, analysis.rotation, dict(analysis.timings_ms))
        if self.cache is not None and record.cache_key and faces != analysis.faces:
            self.cache.put(record.cache_key, measured)
        record = replace(record, analysis=measured)
        choice, allow_all = _choice(record)
        try:
            chosen = choose_faces(measured.faces, choice, allow_all=allow_all)
        except FacefuseError as exc:
            return record.refuse(about(exc, record))
        record = replace(record, faces=tuple(TargetFace(f, f) for f in chosen))
        return self.verdict(record, restoring=_restoring(record))

    def verdict(self, record: Record, *, restoring: bool) -> Record:
        """The faces that pass (``restoring``: or go on to be restored); refused ones skipped or the refusal."""
        usable = tuple(t for t in record.faces if self.usable(t.face, restoring))
        if not usable and record.faces:
            try:
                raise_first_issue(largest(t.face for t in record.faces))
            except FacefuseError as exc:
                return record.refuse(about(exc, record))
        notes = [f"skipped {record.role} face at {np.round(t.found.box).astype(int).tolist()}: "
                 f"{t.face.issues[0].message}" for t in record.faces if t not in usable
                 and record.options.target_face == "all" and record.role == "target"]
        return replace(record, faces=usable).noted(*notes)

    def final(self, record: Record) -> Record:
        """The verdict after the restore stage (restored faces measured on the restored photo), and the notes on
        side faces that are fused anyway."""
        assert record.image is not None
        faces = tuple(replace(t, face=self.measured(record.image, t.face)) for t in record.faces)
        record = self.verdict(replace(record, faces=faces), restoring=False)
        notes = []
        for target in record.faces:
            pose, limit = target.face.pose, self.quality.warn_yaw
            if pose is not None and abs(pose.yaw) > limit:
                notes.append(f"the {record.role if record.role != 'frame' else 'target'} face is turned "
                             f"{abs(pose.yaw):.0f}° (over {limit:.0f}°): its hidden side is filled from the visible "
                             f"side, so expect less of the source's likeness there")
        return record.noted(*notes)


def _choice(record: Record) -> tuple[str | int, bool]:
    if record.role == "source":
        return record.options.source_face, False
    return record.options.target_face, True


def _restoring(record: Record) -> bool:
    """Whether the restore stage will try to fix this record's faces (a target only when it is fused)."""
    return record.options.restore != "off" and (record.role == "source" or record.fusing)
