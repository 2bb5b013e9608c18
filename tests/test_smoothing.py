"""The landmark smoothing of video and live tracks (facefuse.video.smoothing): the head's movement is followed
without the lag a filter on the points themselves has, and both its noise and the shape's are smoothed."""

from __future__ import annotations

import numpy as np

from facefuse.geometry import align
from facefuse.video.smoothing import HeadFilter, MeshSmoother, OneEuroFilter

FPS = 30.0


def face_shape(seed: int = 0) -> np.ndarray:
    """468 points with depth, spread like a face about 200 px wide round (320, 240)."""
    rng = np.random.default_rng(seed)
    return np.column_stack([rng.uniform(220, 420, 468), rng.uniform(120, 360, 468), rng.uniform(-30, 30, 468)])


def moved(shape: np.ndarray, t: float) -> np.ndarray:
    """The shape turned, scaled and shifted at time ``t`` (s): a head panning across the frame, fast."""
    angle, scale, shift = 0.4 * np.sin(2.0 * t), 1.0 + 0.2 * t, (180.0 * t, -60.0 * t)
    c, s = scale * np.cos(angle), scale * np.sin(angle)
    matrix = np.array([[c, -s, shift[0]], [s, c, shift[1]]])
    centre = shape[:, :2].mean(0)
    matrix[:, 2] += centre - matrix[:, :2] @ centre
    return align.apply(matrix, shape)


def jitter(meshes: list[np.ndarray]) -> float:
    """Mean distance of the 2-D points from their own 5-frame moving average (the video benchmark's measure)."""
    stack = np.stack([m[:, :2] for m in meshes])
    kernel = np.ones(5) / 5
    smooth = np.apply_along_axis(lambda v: np.convolve(v, kernel, mode="valid"), 0, stack)
    return float(np.linalg.norm(stack[2:-2] - smooth, axis=-1).mean())


def test_a_head_moving_rigidly_is_followed_without_lag():
    shape, smoother, points = face_shape(), MeshSmoother(1.0, 0.1), OneEuroFilter(1.0, 0.1)
    worst_mesh = worst_points = 0.0
    for frame in range(60):
        mesh = moved(shape, frame / FPS)
        worst_mesh = max(worst_mesh, float(np.abs(smoother(mesh, frame / FPS) - mesh).max()))
        worst_points = max(worst_points, float(np.abs(points(mesh, frame / FPS) - mesh).max()))
    assert worst_points > 2.0  # the filter on the points lags this movement by pixels (4.3)
    assert worst_mesh < 0.1 * worst_points, worst_mesh  # 0.31: only while the turn speeds up or slows down


def test_a_steady_movement_is_followed_exactly_once_the_filter_has_its_speed():
    shape, smoother = face_shape(), MeshSmoother(1.0, 0.1)
    errors = []
    for frame in range(90):
        t = frame / FPS
        mesh = align.apply(np.array([[1.0, 0.0, 90.0 * t], [0.0, 1.0, -30.0 * t]]), shape)  # 90 px/s right, 30 up
        errors.append(float(np.abs(smoother(mesh, t) - mesh).max()))
    assert max(errors[30:]) < 1e-3, errors[30:]


def test_a_head_that_stops_is_not_overshot():
    """A value moving at 300 px/s that stops dead: the gains rise with the surprise, so the estimate settles on
    the stop within a few frames instead of running past it as a plain constant-velocity filter does."""
    adaptive, plain = HeadFilter(), HeadFilter(surprise_px=np.inf)
    past = {"adaptive": 0.0, "plain": 0.0}
    for frame in range(60):
        t = frame / FPS
        value = np.array([300.0 * min(t, 1.0)])
        for name, head in (("adaptive", adaptive), ("plain", plain)):
            past[name] = max(past[name], float(head(value, t)[0]) - 300.0)
    assert past["plain"] > 3.0 and past["adaptive"] < 0.1 * past["plain"], past  # 0.24 against 9.9 px


def test_a_head_turning_past_half_a_turn_is_followed_across_the_wrap():
    """The rotation is filtered unwrapped: from 170° to 190° is 20°, not a jump of 340°."""
    shape, smoother = face_shape(), MeshSmoother(1.0, 0.1)
    centre = shape[:, :2].mean(0)
    for frame in range(40):
        angle = np.radians(160.0 + frame)  # through 180°, where atan2 wraps to −180°
        c, s = np.cos(angle), np.sin(angle)
        matrix = np.array([[c, -s, 0.0], [s, c, 0.0]])
        matrix[:, 2] = centre - matrix[:, :2] @ centre
        mesh = align.apply(matrix, shape)
        assert np.abs(smoother(mesh, frame / FPS) - mesh).max() < 2.0, frame


def test_the_shapes_jitter_is_smoothed_while_the_head_moves():
    rng = np.random.default_rng(1)
    shape, smoother = face_shape(), MeshSmoother(1.0, 0.1)
    measured, smoothed = [], []
    for frame in range(90):
        mesh = moved(shape, frame / FPS)
        mesh[:, :2] += rng.normal(0.0, 0.7, (468, 2))  # FaceMesh's own noise, point by point
        measured.append(mesh)
        smoothed.append(smoother(mesh, frame / FPS))
    assert jitter(smoothed) < 0.5 * jitter(measured)
    truth = [moved(shape, frame / FPS) for frame in range(90)]
    error = np.mean([np.linalg.norm(s[:, :2] - t[:, :2], axis=-1).mean() for s, t in zip(smoothed[10:], truth[10:])])
    assert error < 0.6  # closer to the true points than a measurement is (~0.88 px)
