"""The registration judge of video stability (facefuse_eval.motion): a face that only the camera moves reads near
zero, one that shakes by a pixel reads it, and a face that lags behind the camera reads as drift."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
from video_clips import OBAMA_720P, camera_matrix, load

from facefuse_eval.motion import registered_motion

SIZE = (640, 360)
FRAMES = 40
BOX = (OBAMA_720P[0] - 0.75 * OBAMA_720P[2], OBAMA_720P[1] - 0.9 * OBAMA_720P[2], 1.5 * OBAMA_720P[2],
       1.7 * OBAMA_720P[2])
SCALE = SIZE[1] * 0.4 / OBAMA_720P[2]  # frame pixels per photo pixel at the clip's start


def path() -> list[np.ndarray]:
    return [camera_matrix(SIZE, i / (FRAMES - 1), OBAMA_720P, pan=0.1, zoom=0.15, turn=3 * np.sin(i / 7))
            for i in range(FRAMES)]


def filmed(photo: np.ndarray, matrices: list[np.ndarray]) -> list[np.ndarray]:
    return [cv2.warpAffine(photo, m, SIZE, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
            for m in matrices]


def shifted(matrices: list[np.ndarray], offsets: np.ndarray) -> list[np.ndarray]:
    """The camera path with each frame's picture moved by its offset (frame pixels) after the camera's move."""
    out = []
    for matrix, offset in zip(matrices, offsets, strict=True):
        moved = matrix.copy()
        moved[:, 2] += offset
        out.append(moved)
    return out


def test_a_face_only_the_camera_moves_reads_still_and_a_shaking_one_reads_its_shake(rec: Path):
    photo, camera = load(rec / "obama-720p.jpg"), path()
    still = registered_motion(filmed(photo, camera), camera, BOX, SCALE)
    shake = np.random.default_rng(0).choice([-1.0, 1.0], size=(FRAMES, 2))  # a pixel each way, frame by frame
    shaking = registered_motion(filmed(photo, shifted(camera, shake)), camera, BOX, SCALE)
    assert still.jitter < 0.05 and still.drift < 0.1, still
    # a ±1 px shake on each axis is ~1.1 px from its 5-frame average; the flow's own smoothing reads a little less
    assert 0.6 < shaking.jitter < 1.6, shaking
    assert shaking.jitter > 10 * still.jitter


def test_a_face_that_lags_the_camera_reads_as_drift_not_jitter(rec: Path):
    photo, camera = load(rec / "obama-720p.jpg"), path()
    lag = np.zeros((FRAMES, 2))
    lag[FRAMES // 2:] = (2.0, 0.0)  # from the middle on, 2 px behind where the camera put the face
    lagging = registered_motion(filmed(photo, shifted(camera, lag)), camera, BOX, SCALE)
    assert 0.7 < lagging.drift < 1.5, lagging  # half the frames 2 px from the median frame
    assert lagging.jitter < 0.3, lagging  # one step in 40 frames is not frame-to-frame jitter
