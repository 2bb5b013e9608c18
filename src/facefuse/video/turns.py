"""What the frames of one tracked face share, in frame order: the running colour average (:mod:`.smoothing`) and
the segmenter output carried between its frames (:mod:`.parsing`) — one place for video and live alike.

The tracking thread takes each frame's turns in frame order; the frame's stages use them on whichever thread fuses
it; the caller closes them all afterwards, used or not (a face the gate refused never used its turns), so the
frames after it never wait.
"""

from __future__ import annotations

from ..pipeline import TargetFace
from .options import VideoOptions
from .parsing import ParsingCarry, ParsingTurn
from .smoothing import LutAverage, LutTurn
from .tracking import TrackedFace


class FaceTurns:
    """Per track id: its colour average and its carried segmenter output."""

    def __init__(self, video: VideoOptions) -> None:
        self.video = video
        self.colour: dict[int, LutAverage] = {}
        self.parsing: dict[int, ParsingCarry] = {}

    def take(self, faces: list[TrackedFace], cut: bool) -> tuple[list[TargetFace], list[LutTurn | ParsingTurn]]:
        """This frame's faces for the stages, with their turns, and the turns to close after the frame (``cut``: a
        scene cut came before it, where the light really changes and nothing is carried over)."""
        if cut:
            self.colour.clear()
            self.parsing.clear()
        # a face missing from a frame starts a new group when it is back: its masks are never carried over a gap
        self.parsing = {f.track_id: self.parsing.get(f.track_id) or ParsingCarry(self.video.masks_every)
                        for f in faces}
        targets, turns = [], []
        for tracked in faces:
            colour = (self.colour.setdefault(tracked.track_id, LutAverage(self.video.colour_weight)).turn()
                      if self.video.smoothing else None)
            parsing = self.parsing[tracked.track_id].turn()
            targets.append(TargetFace(tracked.face, tracked.face, colour, parsing))
            turns += [parsing] if colour is None else [colour, parsing]
        return targets, turns
