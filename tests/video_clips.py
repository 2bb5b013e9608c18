"""Test clips made from the shared photos with PyAV: camera moves (pan, zoom, in-plane turn), a cut, frames
without a face, a synthetic audio track, optional rotation metadata and variable frame rate.

Used by tests/test_video.py and benchmarks/video.py, so both measure the same kinds of footage.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
from PIL import Image

TIME_BASE = Fraction(1, 15360)
OBAMA_720P = (663.0, 190.0, 175.0)  # face centre x, y and side in face_recognition/obama-720p.jpg
BIDEN = (580.0, 420.0, 317.0)  # in face_recognition/biden.jpg


def load(path: Path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB"))


def camera_matrix(size: tuple[int, int], t: float, face: tuple[float, float, float], *, pan: float = 0.0,
                  zoom: float = 0.0, turn: float = 0.0, face_height: float = 0.4) -> np.ndarray:
    """The 2×3 photo → frame matrix of a virtual camera at time ``t`` ∈ [0, 1], centred on ``face`` (cx, cy, side
    in photo pixels) so the face fills ``face_height`` of the frame; while ``t`` goes from 0 to 1 the camera pans by
    ``pan`` (fraction of the frame width), zooms in by ``zoom`` (relative) and turns by ``turn`` degrees. Known
    exactly, so a benchmark can undo the camera's move (``facefuse_eval.motion``)."""
    width, height = size
    cx, cy, side = face
    scale = height * face_height / side * (1 + zoom * t)
    matrix = cv2.getRotationMatrix2D((cx, cy), turn * t, scale)
    matrix[:, 2] += (width / 2 - cx + pan * width * (t - 0.5), height / 2 - cy)
    return matrix


def camera(photo: np.ndarray, size: tuple[int, int], t: float, face: tuple[float, float, float], *,
           pan: float = 0.0, zoom: float = 0.0, turn: float = 0.0, face_height: float = 0.4) -> np.ndarray:
    """One frame of the virtual camera of :func:`camera_matrix` over ``photo``."""
    matrix = camera_matrix(size, t, face, pan=pan, zoom=zoom, turn=turn, face_height=face_height)
    return cv2.warpAffine(photo, matrix, size, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)


def blank(size: tuple[int, int], shade: int = 90) -> np.ndarray:
    """A frame with no face: a soft gradient (not flat, so the encoder and the cut detector see texture)."""
    width, height = size
    ramp = np.linspace(shade - 40, shade + 40, width, dtype=np.float32)[None, :, None]
    return np.broadcast_to(ramp, (height, width, 3)).astype(np.uint8).copy()


def write_clip(path: Path, frames: list[np.ndarray], fps: int = 15, *, audio: bool = True, rotation: int = 0,
               vfr: bool = False, crf: int = 18) -> list[int]:
    """Encode ``frames`` (RGB) as H.264 + AAC; returns the video pts. ``vfr`` makes every third frame last twice
    as long; ``rotation`` is written as display-matrix metadata."""
    height, width = frames[0].shape[:2]
    step = int(1 / (fps * TIME_BASE))
    pts, now = [], 0
    for i in range(len(frames)):
        pts.append(now)
        now += step * (2 if vfr and i % 3 == 2 else 1)
    with av.open(str(path), "w") as out:
        video = out.add_stream("libx264", rate=fps)
        video.width, video.height, video.pix_fmt = width, height, "yuv420p"
        video.time_base = TIME_BASE
        video.codec_context.time_base = TIME_BASE
        video.codec_context.options = {"crf": str(crf), "preset": "ultrafast"}
        if rotation:
            video.set_display_rotation(rotation)
        sound = out.add_stream("aac", rate=22050, layout="mono") if audio else None
        for frame_pixels, frame_pts in zip(frames, pts):
            frame = av.VideoFrame.from_ndarray(frame_pixels, format="rgb24")
            frame.pts, frame.time_base = frame_pts, TIME_BASE
            for packet in video.encode(frame):
                out.mux(packet)
        for packet in video.encode(None):
            out.mux(packet)
        if sound is not None:
            seconds = float(now * TIME_BASE)
            samples = np.sin(2 * np.pi * 440 * np.arange(int(22050 * seconds)) / 22050).astype(np.float32) * 0.3
            for start in range(0, len(samples), 1024):
                chunk = samples[start:start + 1024][None]
                frame = av.AudioFrame.from_ndarray(chunk, format="flt", layout="mono")
                frame.sample_rate, frame.pts = 22050, start
                for packet in sound.encode(frame):
                    out.mux(packet)
            for packet in sound.encode(None):
                out.mux(packet)
    return pts


def story(faces: Path, size: tuple[int, int] = (640, 360), frames_per_shot: int = 12) -> list[np.ndarray]:
    """Obama panning and zooming, a cut to the same photo turned and framed closer, frames without a face,
    then a cut to Biden."""
    obama = load(faces / "face_recognition" / "obama-720p.jpg")
    biden = load(faces / "face_recognition" / "biden.jpg")
    n = frames_per_shot
    shot1 = [camera(obama, size, i / (n - 1), OBAMA_720P, pan=0.3, zoom=0.2) for i in range(n)]
    shot2 = [camera(obama, size, i / (n - 1), OBAMA_720P, zoom=0.3, turn=12, face_height=0.6) for i in range(n)]
    empty = [blank(size, 80 + 4 * i) for i in range(max(2, n // 3))]
    shot3 = [camera(biden, size, i / (n - 1), BIDEN, pan=0.2) for i in range(n)]
    return shot1 + shot2 + empty + shot3


def read_video(path: Path) -> tuple[list[np.ndarray], list[int]]:
    """Every frame's Y plane (exact decoded bytes) and pts."""
    planes, pts = [], []
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            plane = frame.planes[0]
            rows = np.frombuffer(plane, np.uint8).reshape(plane.height, plane.line_size)
            planes.append(rows[:, :plane.width].copy())
            pts.append(frame.pts)
    return planes, pts


def audio_packets(path: Path) -> list[bytes]:
    with av.open(str(path)) as container:
        if not container.streams.audio:
            return []
        return [bytes(p) for p in container.demux(container.streams.audio[0]) if p.size]
