"""post: work on the fused face after it is blended in, per face — here post-fusion enhancement (``enhance=auto``).

A source face much smaller than the target face is rendered as an upsampled blur, and the new skin looks plastic
beside the photo's sharp hair and ears (FaceFusion's ``face_enhancer`` role): :func:`facefuse.fusion.enhance.
enhance_fused` lets the trained restorer add the missing fine detail, measured against the photo's own sharpness.
The source's size is its face in the photo as sent (:attr:`facefuse.stages.record.PreparedSource.found`), also
after ``restore`` enlarged it.
Off by default, by measurement (BENCHMARKS.md, restorer section: sharper skin, identity a little lower).

Other post-fusion work is another stage like this one (``per_face = True``, a ``name``, a ``__call__`` that returns
the record with a new ``image``) in :func:`facefuse.stages.default_stages` or given to
:meth:`facefuse.pipeline.Fuser.with_stage`: photos, batches, video, live and Ray run it alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..fusion.enhance import EnhanceConfig, enhance_fused
from ..fusion.restorer import LazyRestorer
from .base import Stage
from .record import Record


@dataclass(frozen=True, eq=False)
class Post(Stage):
    name = "post"
    per_face = True
    restorer: LazyRestorer
    config: EnhanceConfig = field(default_factory=EnhanceConfig)

    def wanted(self, record: Record) -> bool:
        return record.options.enhance == "auto" and record.unblended is not None and record.source is not None

    def __call__(self, record: Record) -> Record:
        assert record.image is not None and record.unblended is not None and record.source is not None
        assert record.face is not None
        if not self.restorer.permitted:
            return record.noted("post-fusion enhancement skipped: the restorer is licensed for non-commercial "
                                "research only and this deployment sets allow_noncommercial_models=false")
        # the photo's own face, not the restored one: pre-restoration enlarges a 40–64 px source to ~100 px without
        # giving the render the detail a 100 px photo has, so the fused face is as soft as the small photo makes it
        found = record.face_source.found.box
        source_px = float(max(found[2], found[3]))
        enhanced = enhance_fused(record.image, record.unblended, record.face.face, source_px, self.restorer.model(),
                                 self.config)
        record = replace(record, image=enhanced.image)
        return record.noted(enhanced.note) if enhanced.note else record
