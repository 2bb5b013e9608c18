"""post: the slot for work on the fused face after it is blended in (e.g. a face enhancer), per face.

Empty by default. To add such work, write a stage like this one (``per_face = True``, a ``name``, a
``__call__`` that returns the record with a new ``image``) and put it in :func:`facefuse.stages.default_stages`
(or give it to :meth:`facefuse.pipeline.Fuser.with_stage`): photos, batches, video, live and Ray run it alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from .base import Stage
from .record import Record

# (photo, the fused face's record) → the photo with that face improved
FaceWork = Callable[[np.ndarray, Record], np.ndarray]


@dataclass(frozen=True, eq=False)
class Post(Stage):
    name = "post"
    per_face = True
    work: FaceWork | None = None  # None: a pass-through that does not run

    def wanted(self, record: Record) -> bool:
        return self.work is not None

    def __call__(self, record: Record) -> Record:
        assert self.work is not None and record.image is not None
        return replace(record, image=self.work(record.image, record))
