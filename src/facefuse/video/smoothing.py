"""Temporal smoothing: a One-Euro filter for landmarks and an exponential average for the colour transfer.

Why One-Euro (Casiez, Roussel & Vogel, CHI 2012): a fixed low-pass either lags behind a moving head or leaves the
jitter of a still one; One-Euro lowers its cut-off when the points barely move (jitter is removed) and raises it
with their speed (no lag). Time comes from the frame timestamps, so variable frame rate is handled.
"""

from __future__ import annotations

import math

import numpy as np


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


class LutAverage:
    """Exponential moving average of the blend stage's colour lookup tables (a :data:`LutSmoother`).

    The histogram match is recomputed on every frame from a face region that shifts a little each time; averaging
    its tables over about ``1/weight`` frames keeps the skin tone from pulsing while still following a change of
    light within a fraction of a second. ``reset`` at a scene cut, where the light really changes at once.
    """

    def __init__(self, weight: float) -> None:
        self.weight = weight
        self._luts: np.ndarray | None = None

    def reset(self) -> None:
        self._luts = None

    def __call__(self, luts: np.ndarray) -> np.ndarray:
        if self._luts is None or self._luts.shape != luts.shape:
            self._luts = luts.astype(np.float64)
        else:
            self._luts = self._luts + self.weight * (luts - self._luts)
        return self._luts
