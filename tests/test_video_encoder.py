"""The video encoder (facefuse.video.io.StreamEncoder): one encoder for a run, its packets filed into segment files,
and no pulse at a segment start — a fresh encoder per segment (the pipeline until the twenty-second stop) began each
segment with a key frame after frames it had given fewer bits, and the face's colour jumped there."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from video_clips import OBAMA_720P, camera, load

from facefuse.video.io import StreamEncoder, VideoInfo

SIZE = (640, 360)
SEGMENT = 15
INFO = VideoInfo(width=SIZE[0], height=SIZE[1], time_base=Fraction(1, 15360), rate=Fraction(30), frames=4 * SEGMENT,
                 start_pts=0, rotation=0, pix_fmt="yuv420p", color_range=0, colorspace=2, color_primaries=2,
                 color_trc=2, audio_streams=0)


@pytest.fixture(scope="module")
def frames(faces_dir: Path) -> list[np.ndarray]:
    """A portrait filmed by a slowly zooming camera with a little sensor noise: texture the encoder has to spend
    bits on in every frame."""
    photo = load(faces_dir / "face_recognition" / "obama-720p.jpg")
    rng = np.random.default_rng(0)
    out = []
    for i in range(4 * SEGMENT):
        frame = camera(photo, SIZE, i / (4 * SEGMENT), OBAMA_720P, zoom=0.1).astype(np.int16)
        out.append(np.clip(frame + rng.normal(0, 3, frame.shape), 0, 255).astype(np.uint8))
    return out


def _encode(frames: list[np.ndarray], folder: Path) -> list[Path]:
    encoder = StreamEncoder(INFO, "libx264", 20, None, "veryfast")
    step = round(1 / (INFO.rate * INFO.time_base))
    files = []
    for i, image in enumerate(frames):
        begins = folder / f".seg_{i // SEGMENT:05d}.mkv.partial" if i % SEGMENT == 0 else None
        if begins is not None:
            files.append(begins)
        encoder.write(image, i * step, begins)
        assert all(done in files for done in encoder.finished())
    encoder.close()
    return files


def _packets(path: Path) -> list[av.Packet]:
    with av.open(str(path)) as container:
        return [p for p in container.demux(container.streams.video[0]) if p.size]


def _decoded(files: list[Path]) -> list[np.ndarray]:
    """The files' packets decoded as one stream, as the output's remux joins them."""
    with av.open(str(files[0])) as first:
        decoder = av.CodecContext.create("h264", "r")
        decoder.extradata = first.streams.video[0].codec_context.extradata
    images = []
    for path in files:
        for packet in _packets(path):
            images += [f.to_ndarray(format="rgb24") for f in decoder.decode(packet)]
    return images + [f.to_ndarray(format="rgb24") for f in decoder.decode(None)]


def test_one_encoders_packets_are_filed_by_segment_and_decode_as_one_stream(frames, tmp_path):
    files = _encode(frames, tmp_path)
    packets = [_packets(path) for path in files]
    assert [len(p) for p in packets] == [SEGMENT] * 4  # each file holds its own frames' packets, in order
    keys = [p.is_keyframe for segment in packets for p in segment]
    assert keys[0] and not any(keys[1:])  # one encoder: one key frame at its start, none at the later segments
    images = _decoded(files)
    assert len(images) == len(frames)
    psnr = [cv2.PSNR(a, b) for a, b in zip(frames, images)]
    assert min(psnr) > 30


def test_no_pulse_at_a_segment_start(frames, tmp_path):
    """The frame-to-frame change of the picture's mean colour at a segment start is like any other frame's."""
    images = _decoded(_encode(frames, tmp_path))
    colours = np.array([cv2.cvtColor(image, cv2.COLOR_RGB2Lab).reshape(-1, 3).mean(0) for image in images])
    drift = np.array([cv2.cvtColor(frame, cv2.COLOR_RGB2Lab).reshape(-1, 3).mean(0) for frame in frames])
    steps = np.linalg.norm(np.diff(colours - drift, axis=0), axis=1)  # the encoder's own steps, the zoom's removed
    at_starts = steps[[SEGMENT - 1, 2 * SEGMENT - 1, 3 * SEGMENT - 1]]
    assert at_starts.max() <= 3 * np.median(steps) + 0.02, (at_starts, np.median(steps))
