"""label: the visible "AI-generated" mark on every output (photos, each video and live frame) unless switched
off; the metadata label is written by the encode stage and cannot be switched off."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..imageio import add_visible_mark
from .base import Stage
from .record import Record


@dataclass(frozen=True, eq=False)
class Label(Stage):
    name = "label"

    def wanted(self, record: Record) -> bool:
        return record.options.visible_label

    def __call__(self, record: Record) -> Record:
        assert record.image is not None
        return replace(record, image=add_visible_mark(record.image))
