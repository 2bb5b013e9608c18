"""Look-ahead smoothing of a video file's faces: each frame's head placed from the frames around it.

Why: a camera's frames are fused as they come, so their landmarks can only be smoothed from the frames before
(:class:`~.smoothing.MeshSmoother`: the face's shape by a One-Euro filter, the head's movement by a
constant-velocity filter), which trades jitter against lag. A video file's later frames are already there: the
head's movement — the 2-D similarity taking the face's first mesh to each frame's raw mesh — is fitted over
``look_ahead`` frames on either side by a straight line in time (a Savitzky–Golay filter of degree 1) and read at
the frame: no lag for a steady movement, the measurements' noise averaged over up to 2 × ``look_ahead`` + 1
frames. The face's shape (its expression) stays the causal filter's, which follows a mouth that opens and closes
without averaging it away. The fit never reaches across a scene cut or a frame in which the face was not followed;
at the ends of such a run it uses the frames there are.

The frames wait here ``look_ahead`` frames before they are fused (``look_ahead`` decoded frames held in memory); a
resumed run starts the tracking afresh at its segment, as without look-ahead.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

import cv2
import numpy as np

from ..analysis.types import Face
from ..geometry import align
from .tracking import TrackedFace

Frame = TypeVar("Frame")


@dataclass
class Placed(Generic[Frame]):
    """A frame and its chosen faces (``cut``: a scene cut came before it), the faces placed from the frames around."""

    frame: Frame
    faces: list[TrackedFace]
    cut: bool


@dataclass
class _Run:
    """One face over consecutive frames of one shot, from frame ``start``: the similarity (a, b, tx, ty of
    [[a, −b, tx], [b, a, ty]]) taking its first raw mesh (``reference``) to each frame's raw mesh."""

    start: int
    reference: np.ndarray
    heads: list[np.ndarray] = field(default_factory=list)

    @property
    def end(self) -> int:
        """The frame after its last measurement."""
        return self.start + len(self.heads)


def _head(matrix: np.ndarray) -> np.ndarray:
    """A similarity's four numbers (a, b, tx, ty): a straight line through them is a similarity at every time."""
    return np.array([matrix[0, 0], matrix[1, 0], matrix[0, 2], matrix[1, 2]])


def _matrix(head: np.ndarray) -> np.ndarray:
    a, b, tx, ty = head
    return np.array([[a, -b, tx], [b, a, ty]])


def line_fit(meshes: list[np.ndarray], at: int) -> np.ndarray:
    """The straight line through ``meshes`` (arrays of one shape, one per frame, frame 0 first) fitted by least
    squares in time, read at frame ``at``: their mean when ``at`` is the window's middle."""
    stacked = np.stack(meshes).astype(np.float64)
    if len(meshes) < 3:  # a line through one or two points passes through each
        return stacked[at].astype(np.float32)
    times = np.arange(len(meshes), dtype=np.float64) - at
    mean_time = times.mean()
    centred = times - mean_time
    mean = stacked.mean(0)
    slope = np.tensordot(centred, stacked - mean, axes=(0, 0)) / float((centred * centred).sum())
    return (mean - slope * mean_time).astype(np.float32)


class LookAhead(Generic[Frame]):
    """Holds each frame until the ``frames`` after it are tracked, then gives it back with its faces' heads placed
    by :func:`line_fit` over the similarities of their raw meshes (``TrackedFace.raw``), their shapes the tracker's;
    ``measured(frame, mesh)`` makes the face of a placed mesh (box, five points, pose, the gate's measurements).
    Frames come back in their order."""

    def __init__(self, frames: int, measured: Callable[[Frame, np.ndarray], Face]) -> None:
        self.frames = frames
        self.measured = measured
        self._waiting: deque[tuple[int, Placed[Frame]]] = deque()
        self._runs: dict[int, list[_Run]] = {}  # per track id, its runs still within reach of a waiting frame
        self._next = 0

    def push(self, frame: Frame, faces: list[TrackedFace], cut: bool) -> Iterator[Placed[Frame]]:
        """Take the next frame with its chosen faces; give back the frames now placed (those ``frames`` before)."""
        if not self.frames:  # nothing to wait for: the faces as the tracker smoothed them
            yield Placed(frame, faces, cut)
            return
        index, self._next = self._next, self._next + 1
        for face in faces:
            raw = (face.raw if face.raw is not None else face.face.landmarks)[:, :2]
            runs = self._runs.setdefault(face.track_id, [])
            if cut or not runs or runs[-1].end != index:  # a new shot, or the face is back after a gap
                runs.append(_Run(index, raw.copy()))
            runs[-1].heads.append(_head(align.similarity(runs[-1].reference, raw)))
        self._waiting.append((index, Placed(frame, faces, cut)))
        while self._waiting and self._waiting[0][0] + self.frames < index + 1:
            yield self._place(*self._waiting.popleft())

    def flush(self) -> Iterator[Placed[Frame]]:
        """The frames still waiting (the clip ended), placed from the frames there are."""
        while self._waiting:
            yield self._place(*self._waiting.popleft())

    def _place(self, index: int, waiting: Placed[Frame]) -> Placed[Frame]:
        faces = []
        for face in waiting.faces:
            run = next(r for r in self._runs[face.track_id] if r.start <= index < r.end)
            first = max(run.start, index - self.frames)
            window = run.heads[first - run.start:min(run.end, index + self.frames + 1) - run.start]
            mesh = face.face.landmarks
            assert mesh is not None
            # the tracker's mesh taken from its own head placement to the fitted one: its shape is kept
            own = cv2.invertAffineTransform(align.similarity(run.reference, mesh[:, :2]))
            fitted = _matrix(line_fit(window, index - first).astype(np.float64))
            moved = np.column_stack([fitted[:, :2] @ own[:, :2], fitted[:, :2] @ own[:, 2] + fitted[:, 2]])
            placed = self.measured(waiting.frame, align.apply(moved, mesh).astype(np.float32))
            faces.append(replace(face, face=placed))
        self._forget(index - self.frames)
        return replace(waiting, faces=faces)

    def _forget(self, before: int) -> None:
        """Drop the measurements of the frames before frame ``before``: no waiting frame reaches them, and a face
        followed for the whole clip keeps ``2 × frames + 1`` of them, not one per frame."""
        for track_id in list(self._runs):
            kept = [r for r in self._runs[track_id] if r.end > before]
            for run in kept:
                if run.start < before:
                    del run.heads[:before - run.start]
                    run.start = before
            if kept:
                self._runs[track_id] = kept
            else:
                del self._runs[track_id]
