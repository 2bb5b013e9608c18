"""What the frames of one tracked face share, in frame order: the running colour average (:mod:`.smoothing`), and
carried between its frames in groups of ``masks_every`` (:mod:`.parsing`) the segmenter output and the render's
face triangles, make-up toning, mirror fill and choice of eyes (:class:`~facefuse.fusion.engine.StreamCarry`) — one place for video
and live. Given several source photos, each track is fused from the one turned most like its face at its first
frame (again after a scene cut), and keeps it.

The tracking thread takes each frame's turns in frame order; the frame's stages use them on whichever thread fuses
it; the caller closes them all afterwards, used or not (a face the gate refused never used its turns), so the
frames after it never wait.
"""

from __future__ import annotations

from ..fusion.engine import StreamCarry
from ..pipeline import PreparedSource, TargetFace
from .options import VideoOptions
from .parsing import ParsingCarry, ParsingTurn
from .smoothing import LutAverage, LutTurn
from .tracking import TrackedFace


class FaceTurns:
    """Per track id: its colour average and its carried segmenter output, face triangles, make-up toning, mirror
    fill and choice of eyes; and of several ``source`` photos, its own."""

    def __init__(self, video: VideoOptions, source: PreparedSource | None = None) -> None:
        self.video = video
        self.source = source
        self.photo: dict[int, PreparedSource] = {}  # per track, of several source photos
        self.colour: dict[int, LutAverage] = {}
        self.parsing: dict[int, ParsingCarry] = {}
        self.render: dict[int, tuple[ParsingCarry, ...]] = {}  # triangles, toning, mirror fill, eyes

    def take(self, faces: list[TrackedFace], cut: bool) -> tuple[list[TargetFace], list[LutTurn | ParsingTurn]]:
        """This frame's faces for the stages, with their turns, and the turns to close after the frame (``cut``: a
        scene cut came before it, where the light really changes and nothing is carried over)."""
        if cut:
            self.colour.clear()
            self.parsing.clear()
            self.render.clear()
            self.photo.clear()
        source = self.source
        if source is not None and source.others:  # chosen at a track's first frame (and when it is back)
            self.photo = {f.track_id: self.photo.get(f.track_id) or source.nearest(f.face) for f in faces}
        # a face missing from a frame starts a new group when it is back: nothing is carried over a gap
        every = self.video.masks_every
        self.parsing = {f.track_id: self.parsing.get(f.track_id) or ParsingCarry(every, chained=True)
                        for f in faces}
        # the eyes' carry is chained: each group's choice is made with the one before (a hysteresis)
        self.render = {f.track_id: self.render.get(f.track_id) or (*(ParsingCarry(every) for _ in range(3)),
                                                                   ParsingCarry(every, chained=True))
                       for f in faces}
        targets, turns = [], []
        for tracked in faces:
            colour = (self.colour.setdefault(tracked.track_id, LutAverage(self.video.colour_weight)).turn()
                      if self.video.smoothing else None)
            parsing = self.parsing[tracked.track_id].turn()
            render = [carry.turn() for carry in self.render[tracked.track_id]]
            targets.append(TargetFace(tracked.face, tracked.face, colour, parsing, StreamCarry(*render),
                                      source=self.photo.get(tracked.track_id)))
            turns += ([] if colour is None else [colour]) + [parsing, *render]
        return targets, turns
