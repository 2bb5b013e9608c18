"""Look-ahead smoothing of a video file's landmarks: each frame's face placed from the frames around it.

Why: a camera's frames are fused as they come, so their landmarks can only be smoothed from the frames before
(:class:`~.smoothing.MeshSmoother`), which trades jitter against lag. A video file's later frames are already there:
each followed face's raw meshes over ``look_ahead`` frames on either side are fitted by a straight line in time (a
Savitzky–Golay filter of degree 1) and the line is read at the frame — no lag for a steady movement, the meshes'
noise averaged over up to 2 × ``look_ahead`` + 1 frames. The fit never reaches across a scene cut or a frame in
which the face was not followed; at the ends of such a run it uses the frames there are.

A straight line misplaces a head that speeds up or stops within the window (the real clip's singer: doubled eyes
where it did, docs/video.md). How far off it is shows in the window itself: a parabola fitted to the same meshes
reads elsewhere at the frame. Where the two differ by more than :data:`STEADY` of the face's width the face keeps
the causal filter's mesh (whose gains rise with surprise), fully from :data:`MOVING`, blended between, so the
line's smoothing is kept for steady stretches and never bought with a misplaced face. On the portrait clips (a
steady camera path) the two fits differ by at most 0.2 % of the face's width; on the real clip by a median 3.3 %.

The frames wait here ``look_ahead`` frames before they are fused (``look_ahead`` decoded frames held in memory); a
resumed run starts the tracking afresh at its segment, as without look-ahead. The live camera has no later frames
and keeps the causal filters alone.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

import numpy as np

from ..analysis.types import Face
from .tracking import TrackedFace

Frame = TypeVar("Frame")

STEADY = 0.003  # line and parabola this close (a fraction of the face's width): the line's mesh alone
MOVING = 0.006  # this far apart: the causal filter's mesh alone; blended between


@dataclass
class Placed(Generic[Frame]):
    """A frame and its chosen faces (``cut``: a scene cut came before it), the faces placed from the frames around."""

    frame: Frame
    faces: list[TrackedFace]
    cut: bool


@dataclass
class _Run:
    """One face's raw meshes over consecutive frames of one shot, from frame ``start``."""

    start: int
    meshes: list[np.ndarray] = field(default_factory=list)

    @property
    def end(self) -> int:
        """The frame after its last mesh."""
        return self.start + len(self.meshes)


def line_fit(meshes: list[np.ndarray], at: int) -> np.ndarray:
    """The straight line through ``meshes`` (one per frame, frame 0 first) fitted by least squares in time, read at
    frame ``at``: their mean when ``at`` is the window's middle."""
    stacked = np.stack(meshes).astype(np.float64)
    if len(meshes) < 3:  # a line through one or two points passes through each
        return stacked[at].astype(np.float32)
    times = np.arange(len(meshes), dtype=np.float64) - at
    mean_time = times.mean()
    centred = times - mean_time
    mean = stacked.mean(0)
    slope = np.tensordot(centred, stacked - mean, axes=(0, 0)) / float((centred * centred).sum())
    return (mean - slope * mean_time).astype(np.float32)


def parabola_fit(meshes: list[np.ndarray], at: int) -> np.ndarray:
    """The parabola through ``meshes`` fitted by least squares in time, read at frame ``at`` (four meshes or more)."""
    times = np.vander(np.arange(len(meshes), dtype=np.float64) - at, 3)  # columns t², t, 1 (t = 0 at ``at``)
    weights = np.linalg.solve(times.T @ times, times.T)[-1]  # the fit's constant term: a weighted sum of the frames
    return np.tensordot(weights, np.stack(meshes).astype(np.float64), axes=1).astype(np.float32)


def placed_mesh(meshes: list[np.ndarray], at: int, causal: np.ndarray) -> np.ndarray:
    """Frame ``at``'s mesh: :func:`line_fit` over ``meshes`` while the head moves steadily, the ``causal`` filter's
    mesh where a parabola says it speeds up or stops (module docstring)."""
    line = line_fit(meshes, at)
    if len(meshes) < 4:  # too few frames to tell a turn from noise
        return line
    width = float(np.ptp(meshes[at][:, 0]))
    apart = float(np.linalg.norm((parabola_fit(meshes, at) - line)[:, :2], axis=-1).mean())
    weight = min(1.0, max(0.0, (apart / max(width, 1e-6) - STEADY) / (MOVING - STEADY)))
    return line if weight == 0 else ((1 - weight) * line + weight * causal).astype(np.float32)


class LookAhead(Generic[Frame]):
    """Holds each frame until the ``frames`` after it are tracked, then gives it back with its faces placed by
    :func:`placed_mesh` over their raw meshes (``TrackedFace.raw``); ``moved(face, mesh)`` makes the tracker's face
    one with the placed mesh. Frames come back in their order."""

    def __init__(self, frames: int, moved: Callable[[Face, np.ndarray], Face]) -> None:
        self.frames = frames
        self.moved = moved
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
            runs = self._runs.setdefault(face.track_id, [])
            if cut or not runs or runs[-1].end != index:  # a new shot, or the face is back after a gap
                runs.append(_Run(index))
            runs[-1].meshes.append(face.raw if face.raw is not None else face.face.landmarks)
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
            window = run.meshes[first - run.start:min(run.end, index + self.frames + 1) - run.start]
            mesh = placed_mesh(window, index - first, face.face.landmarks)
            faces.append(replace(face, face=self.moved(face.face, mesh)))
        self._forget(index - self.frames)
        return replace(waiting, faces=faces)

    def _forget(self, before: int) -> None:
        """Drop the meshes of the frames before frame ``before``: no waiting frame reaches them, and a face
        followed for the whole clip keeps ``2 × frames + 1`` meshes, not one per frame."""
        for track_id in list(self._runs):
            kept = [r for r in self._runs[track_id] if r.end > before]
            for run in kept:
                if run.start < before:
                    del run.meshes[:before - run.start]
                    run.start = before
            if kept:
                self._runs[track_id] = kept
            else:
                del self._runs[track_id]
