"""Temporal smoothing: a One-Euro filter for the landmarks' shape, an adaptive constant-velocity filter for the
head's movement, and an exponential average for the colour transfer.

Why One-Euro (Casiez, Roussel & Vogel, CHI 2012): a fixed low-pass either lags behind a moving head or leaves the
jitter of a still one; One-Euro lowers its cut-off when the points barely move (jitter is removed) and raises it
with their speed (no lag). Time comes from the frame timestamps, so variable frame rate is handled.
"""

from __future__ import annotations

import math
import threading

import cv2
import numpy as np

from ..geometry import align


def _alpha(cutoff: np.ndarray | float, dt: float) -> np.ndarray | float:
    tau = 1.0 / (2 * math.pi * cutoff)
    return 1.0 / (1.0 + tau / dt)


class OneEuroFilter:
    """One-Euro filter over an array of values (e.g. a 468×3 mesh), each element filtered on its own.

    ``min_cutoff`` (Hz) sets how still a still face stays; ``beta`` (per unit of speed) how fast the cut-off
    rises when the face moves; speeds are in the values' units per second.
    """

    def __init__(self, min_cutoff: float, beta: float, d_cutoff: float = 1.0) -> None:
        self.min_cutoff, self.beta, self.d_cutoff = min_cutoff, beta, d_cutoff
        self._value: np.ndarray | None = None
        self._speed: np.ndarray | None = None
        self._time = 0.0

    def reset(self) -> None:
        self._value = self._speed = None

    def __call__(self, value: np.ndarray, time: float) -> np.ndarray:
        if self._value is None or self._speed is None or time <= self._time:
            self._value, self._speed, self._time = value.copy(), np.zeros_like(value), time
            return value
        dt = time - self._time
        speed = (value - self._value) / dt
        self._speed = self._speed + _alpha(self.d_cutoff, dt) * (speed - self._speed)
        cutoff = self.min_cutoff + self.beta * np.abs(self._speed)
        self._value = self._value + _alpha(cutoff, dt) * (value - self._value)
        self._time = time
        return self._value


# The head's movement (facefuse.video.smoothing.HeadFilter), chosen on benchmarks/video.py's clips ("Followed meshes"
# and the real clip's identity): the α-β gains while the head moves steadily (lower: less noise, more lag where it
# speeds up), and the surprise (px, smoothed) from which a measurement is taken whole — a head that starts, stops
# or turns fast is followed at once instead of overshot
HEAD_GAINS = (0.4, 0.1)
HEAD_SURPRISE_PX = 2.0


class HeadFilter:
    """An adaptive constant-velocity (α-β) filter over an array of values in pixels: a steady movement is followed
    without lag (the velocity is part of the estimate) and its measurement noise mostly removed; where a value
    departs from its prediction by more than noise (a start, a stop), its gains rise toward 1, as a One-Euro
    filter's cut-off rises with speed — a plain α-β filter overshot the real clip's singer (its fused faces' cosine
    to the source 0.461 → 0.446)."""

    def __init__(self, gains: tuple[float, float] = HEAD_GAINS, surprise_px: float = HEAD_SURPRISE_PX) -> None:
        self.alpha, self.beta = gains
        self.surprise_px = surprise_px
        self._value: np.ndarray | None = None
        self._velocity: np.ndarray | None = None
        self._surprise: np.ndarray | None = None
        self._time = 0.0

    def __call__(self, value: np.ndarray, time: float) -> np.ndarray:
        if self._value is None or time <= self._time:
            self._value, self._velocity, self._surprise, self._time = value.copy(), None, None, time
            return value
        dt = time - self._time
        self._time = time
        if self._velocity is None:  # the second measurement gives the speed: a track found moving starts moving
            self._velocity, self._value = (value - self._value) / dt, value.copy()
            return value
        predicted = self._value + self._velocity * dt
        surprise = value - predicted
        size = np.abs(surprise)
        self._surprise = size if self._surprise is None else self._surprise + 0.5 * (size - self._surprise)
        alpha = np.minimum(1.0, self.alpha + (1.0 - self.alpha) * self._surprise / self.surprise_px)
        self._value = predicted + alpha * surprise
        self._velocity = self._velocity + self.beta * (alpha / self.alpha) * surprise / dt
        return self._value


class MeshSmoother:
    """A face mesh smoothed in two parts: its *shape* in the head's own frame by a One-Euro filter, and the head's
    movement (the 2-D similarity — shift, rotation, scale — that takes the head's frame to the picture) by
    :class:`HeadFilter`.

    Why not the One-Euro filter on the points themselves: however fast its cut-off rises, it lags a moving head,
    and the new face is drawn at the filtered points while everything round it (the jaw line's outside, the hair,
    the ears, the target's own pixels under the feathered edge) is where the head really is; on a self-swap (the
    clip's own photo as the source) that mismatch read as more jitter than the clip had (+0.051 px at 720p, issue
    19). The similarity, fitted to all 468 points, carries little of any one point's noise, and what it carries is
    noise about a steady movement, which a constant-velocity filter takes out without lagging it.
    """

    def __init__(self, min_cutoff: float, beta: float) -> None:
        self._shape = OneEuroFilter(min_cutoff, beta)
        self._head = HeadFilter()
        self._reference: np.ndarray | None = None  # the first mesh's 2-D points: the head's frame
        self._centre = np.zeros(2)
        self._width = 1.0  # the reference's width: rotation and log scale × this are pixels at the face's edge
        self._angle = 0.0  # the last rotation, to unwrap the next one

    def __call__(self, mesh: np.ndarray, time: float) -> np.ndarray:
        if self._reference is None:
            self._reference = mesh[:, :2].copy()
            self._centre = self._reference.mean(0)
            self._width = max(float(np.ptp(self._reference[:, 0])), 1.0)
        to_head = align.similarity(mesh[:, :2], self._reference)
        shape = self._shape(align.apply(to_head, mesh), time)
        return align.apply(self._moved(cv2.invertAffineTransform(to_head), time), shape)

    def _moved(self, to_picture: np.ndarray, time: float) -> np.ndarray:
        """``to_picture`` (head frame → picture) with its movement filtered, as where the reference's centre lands,
        the rotation and the log scale (the last two × the face's width: pixels at its edge)."""
        linear = to_picture[:, :2]
        angle = math.atan2(linear[1, 0], linear[0, 0])
        angle = self._angle + math.remainder(angle - self._angle, 2 * math.pi)  # no jump at ±180°
        self._angle = angle
        centre = linear @ self._centre + to_picture[:, 2]
        scale = math.log(math.sqrt(abs(np.linalg.det(linear))))
        x, y, turned, scaled = self._head(np.array([centre[0], centre[1], angle * self._width,
                                                    scale * self._width]), time)
        cos, sin = math.cos(turned / self._width), math.sin(turned / self._width)
        rotation = math.exp(scaled / self._width) * np.array([[cos, -sin], [sin, cos]])
        return np.column_stack([rotation, np.array([x, y]) - rotation @ self._centre])


class LutAverage:
    """Exponential moving average of the blend stage's colour lookup tables, updated in frame order.

    The histogram match is recomputed on every frame from a face region that shifts a little each time; averaging
    its tables over about ``1/weight`` frames keeps the skin tone from pulsing while still following a change of
    light within a fraction of a second. A new average starts at a scene cut, where the light really changes.

    Why turns: frames are fused on several threads at once, but an average must take its frames in order. The
    frame loop takes a :meth:`turn` per frame in frame order (one thread); each turn is the frame's
    :data:`~facefuse.fusion.blend.LutSmoother` and waits, when called, until every earlier turn was used or closed.
    """

    def __init__(self, weight: float) -> None:
        self.weight = weight
        self._luts: np.ndarray | None = None
        self._issued = 0
        self._served = 0
        self._ready = threading.Condition()

    def turn(self) -> LutTurn:
        """The next frame's place in the average (call in frame order)."""
        self._issued += 1
        return LutTurn(self, self._issued - 1)

    def _take(self, index: int, luts: np.ndarray | None) -> np.ndarray | None:
        """Frame ``index``'s tables (None: it had none) folded into the average, once the frames before it were."""
        with self._ready:
            self._ready.wait_for(lambda: self._served == index)
            if luts is not None:
                if self._luts is None or self._luts.shape != luts.shape:
                    self._luts = luts.astype(np.float64)
                else:
                    self._luts = self._luts + self.weight * (luts - self._luts)
            self._served += 1
            self._ready.notify_all()
            return None if luts is None else self._luts


class LutTurn:
    """One frame's use of a :class:`LutAverage`: called with the frame's tables (at most once), else closed."""

    def __init__(self, average: LutAverage, index: int) -> None:
        self._average = average
        self._index = index
        self._result: np.ndarray | None = None
        self._done = False

    def __call__(self, luts: np.ndarray) -> np.ndarray:
        if not self._done:
            self._done = True
            self._result = self._average._take(self._index, luts)
        assert self._result is not None
        return self._result

    def close(self) -> None:
        """Give up the turn unused (the frame matched no colours, or failed), so later frames need not wait."""
        if not self._done:
            self._done = True
            self._average._take(self._index, None)
