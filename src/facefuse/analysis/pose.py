"""Head pose from the 3-D FaceMesh: build the face's own axes from the mesh and read Euler angles off them.

FaceMesh's z shares the x/y pixel scale (smaller z = nearer the camera), so the eye line gives the face's x axis,
the forehead→chin line its y axis, and their cross product the direction the face points. This needs no canonical
3-D model or camera intrinsics and is exact for a weak-perspective camera, which a portrait photo is.
"""

from __future__ import annotations

import numpy as np

from .landmarks import CHIN, FOREHEAD, LEFT_CHEEK_EDGE, LEFT_EYE_OUTER, RIGHT_CHEEK_EDGE, RIGHT_EYE_OUTER
from .types import Pose


def face_axes(mesh: np.ndarray) -> np.ndarray:
    """3×3 rotation whose columns are the face's x (towards image right), y (down) and z (into the image)."""
    x_axis = (mesh[LEFT_EYE_OUTER] - mesh[RIGHT_EYE_OUTER]) + (mesh[LEFT_CHEEK_EDGE] - mesh[RIGHT_CHEEK_EDGE])
    y_axis = mesh[CHIN] - mesh[FOREHEAD]
    x_axis = x_axis / np.linalg.norm(x_axis)
    y_axis = y_axis - x_axis * np.dot(y_axis, x_axis)
    y_axis = y_axis / np.linalg.norm(y_axis)
    z_axis = np.cross(x_axis, y_axis)
    return np.column_stack([x_axis, y_axis, z_axis])


def head_pose(mesh: np.ndarray) -> Pose:
    """yaw > 0: the person turns to their right (image left); pitch > 0: chin up; roll > 0: clockwise tilt."""
    axes = face_axes(mesh)
    roll = np.arctan2(axes[1, 0], axes[0, 0])
    # read yaw and pitch in the head's own upright frame: undo the roll first, or a tilted (or sideways) head
    # would report its yaw as pitch and the other way round
    cos, sin = np.cos(roll), np.sin(roll)
    facing = np.array([[cos, sin, 0.0], [-sin, cos, 0.0], [0.0, 0.0, 1.0]]) @ axes[:, 2]
    yaw = np.degrees(np.arcsin(np.clip(facing[0], -1, 1)))
    pitch = np.degrees(np.arcsin(np.clip(facing[1], -1, 1)))
    return Pose(float(yaw), float(pitch), float(np.degrees(roll)))
