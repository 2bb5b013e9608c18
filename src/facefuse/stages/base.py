"""What a stage is, and the ordered list that runs them.

A stage is a small frozen object with a ``name``, its configuration (and the loaded models it uses) as fields,
and ``__call__(record) -> record``. ``per_face`` stages run once for each face that passed the gate (the list runs
them face by face, each face's result becoming the next one's photo); the others once per photo. ``wanted`` says
whether a stage has work for a record (a cache hit needs no detector; zero degrees need no render): a stage that
is not wanted is not timed, so a record's ``timings_ms`` names exactly the stages that ran.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

from ..errors import FacefuseError
from .record import Ahead, Record


@dataclass(frozen=True, eq=False)
class Stage:
    name: ClassVar[str]
    per_face: ClassVar[bool] = False

    def wanted(self, record: Record) -> bool:
        return True

    def __call__(self, record: Record) -> Record:
        raise NotImplementedError

    def ahead(self, record: Record) -> Record:
        """The part of a per-face stage's work that needs the target alone (not the source, not an earlier stage's
        output past the target's own), done before the source is ready: the record with that part's result in its
        per-face fields, which the stage's run then uses instead of computing it. Most stages have none."""
        return record

    def many(self, records: list[Record]) -> list[Record]:
        """Several records at once; a stage with a batch axis (landmarks) overrides it. Each record gets the
        time of the whole call."""
        return [self(r) for r in records]


def _timed(stage: Stage, record: Record, step: Callable[[Record], Record] | None = None) -> Record:
    """``stage(record)`` (or another ``step`` of the stage's), its time added under the stage's name."""
    start = time.perf_counter()
    out = stage(record) if step is None else step(record)
    return out.timed(stage.name, (time.perf_counter() - start) * 1000)


class Pipeline:
    """An ordered list of stages: the Fuser's whole list, or a slice of it that one path runs."""

    def __init__(self, stages: Iterable[Stage]) -> None:
        self.stages: tuple[Stage, ...] = tuple(stages)
        names = self.names
        if len(set(names)) != len(names):
            raise ValueError(f"stage names must be unique: {names}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.stages)

    def __getitem__(self, name: str) -> Stage:
        return self.stages[self.names.index(name)]

    def between(self, first: str, last: str) -> Pipeline:
        """The stages from ``first`` to ``last``, both included (whatever was inserted between them too)."""
        return Pipeline(self.stages[self.names.index(first):self.names.index(last) + 1])

    def split(self, name: str) -> tuple[Pipeline, Pipeline]:
        """The stages before the one named ``name``, and the rest from it on."""
        at = self.names.index(name)
        return Pipeline(self.stages[:at]), Pipeline(self.stages[at:])

    def only(self, names: Sequence[str]) -> Pipeline:
        """The named stages, in the list's order."""
        return Pipeline(s for s in self.stages if s.name in names)

    def inserted(self, stage: Stage, after: str) -> Pipeline:
        """This list with ``stage`` added after the stage named ``after``."""
        at = self.names.index(after) + 1
        return Pipeline((*self.stages[:at], stage, *self.stages[at:]))

    def __call__(self, record: Record) -> Record:
        stages = self.stages
        i = 0
        while i < len(stages):
            if not stages[i].per_face or record.role == "source":  # a source record is its one face
                if stages[i].wanted(record):
                    record = _timed(stages[i], record)
                i += 1
                continue
            end = i
            while end < len(stages) and stages[end].per_face:
                end += 1
            record = self._each_face(stages[i:end], record)
            i = end
        return record

    def ahead(self, record: Record) -> Record:
        """Each per-face stage's :meth:`Stage.ahead` work on the record's first face, in the list's order, kept with
        that face (:class:`~facefuse.stages.record.Ahead`) for the run that follows; timed under the stages' names.

        Why: a photo fusion analyses its target on a second thread while this one prepares the source, and the
        target's analysis is done first (~12 of ~25 ms at 720p): what the target alone decides (its aligned crop,
        its half of the segmenter output) fills that wait instead of the path after it. The first face only: the
        faces after it see the photo with that one changed."""
        if not record.fusing or not record.faces:
            return record
        first = record.with_face(record.faces[0])
        for stage in self.stages:
            # (a stage with no such work is not named in the timings)
            if stage.per_face and type(stage).ahead is not Stage.ahead and stage.wanted(first):
                first = _timed(stage, first, stage.ahead)
        done = replace(record.faces[0], ahead=Ahead(first.aligned, first.target_parsing))
        return replace(first.with_face(None), faces=(done, *record.faces[1:]))

    @staticmethod
    def _each_face(stages: Sequence[Stage], record: Record) -> Record:
        if not record.fusing:
            return record
        for face in record.faces:
            record = record.with_face(face)
            for stage in stages:
                if stage.wanted(record):
                    record = _timed(stage, record)
        return record.with_face(None)

    def many(self, records: list[Record]) -> list[Record | FacefuseError]:
        """Several records stage by stage (photo-level stages only), so a batching stage sees them all at once;
        a record whose stage raised gets its error in its place and leaves the batch."""
        found: list[Record | FacefuseError] = list(records)
        for stage in self.stages:
            live = [i for i, r in enumerate(found) if isinstance(r, Record) and stage.wanted(r)]
            if not live:
                continue
            start = time.perf_counter()
            try:
                done = stage.many([found[i] for i in live])  # type: ignore[misc]
            except FacefuseError:
                done = [self._one(stage, found[i]) for i in live]  # type: ignore[arg-type]
            ms = (time.perf_counter() - start) * 1000
            for i, out in zip(live, done):
                found[i] = out if isinstance(out, FacefuseError) else out.timed(stage.name, ms)
        return found

    @staticmethod
    def _one(stage: Stage, record: Record) -> Record | FacefuseError:
        try:
            return stage(record)
        except FacefuseError as exc:
            return exc
