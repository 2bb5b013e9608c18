"""Client side of /v1/jobs as a user's script would write it: submit, poll until a state, download."""

from __future__ import annotations

import io
import time
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

FINISHED = ("done", "failed", "cancelled", "expired")


def submit(url: str, source: Path, targets: Sequence[Path | tuple[str, bytes]], *,
           headers: dict[str, str] | None = None, **fields: str) -> httpx.Response:
    files: list[tuple[str, tuple[str, bytes]]] = [("source", (source.name, source.read_bytes()))]
    for target in targets:
        files.append(("targets", (target.name, target.read_bytes()) if isinstance(target, Path) else target))
    return httpx.post(url + "/v1/jobs", files=files, data=fields, headers=headers or {}, timeout=120)


def wait_for(url: str, job_id: str, until: Callable[[dict[str, Any]], bool] = lambda j: j["state"] in FINISHED, *,
             headers: dict[str, str] | None = None, timeout_s: float = 240.0) -> dict[str, Any]:
    """Polls the job until ``until(job)``; fails with the last answer when that never happens."""
    end = time.monotonic() + timeout_s
    job: dict[str, Any] = {}
    while time.monotonic() < end:
        answer = httpx.get(f"{url}/v1/jobs/{job_id}", headers=headers or {}, timeout=30)
        assert answer.status_code == 200, answer.text
        job = answer.json()
        if until(job):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} never reached the awaited state; last: {job}")


def zip_of(members: dict[str, bytes], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def make_clip(path: Path, photo: Path, *, frames: int = 40, fps: int = 10, size: tuple[int, int] = (480, 360),
              blank: int = 0, audio: bool = True) -> Path:
    """An H.264 MP4 made from a real photo: the camera pans slowly across it (so faces move), the last ``blank``
    frames show no face (a grey card), and a 440 Hz AAC tone runs under it when ``audio``."""
    import av
    import numpy as np
    from PIL import Image

    width, height = size
    picture = Image.open(photo).convert("RGB")
    scale = max((width + frames) / picture.width, height / picture.height)
    picture = np.asarray(picture.resize((int(picture.width * scale) + 1, int(picture.height * scale) + 1)))
    with av.open(str(path), "w") as container:
        video = container.add_stream("libx264", rate=fps)
        video.width, video.height, video.pix_fmt = width, height, "yuv420p"
        video.options = {"preset": "ultrafast", "crf": "20"}
        sound = container.add_stream("aac", rate=44100) if audio else None
        for i in range(frames):
            if i >= frames - blank:
                pixels = np.full((height, width, 3), 128, np.uint8)
            else:
                pixels = np.ascontiguousarray(picture[:height, i:i + width])
            for packet in video.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                container.mux(packet)
        for packet in video.encode():
            container.mux(packet)
        if sound is not None:
            seconds = frames / fps
            t = np.arange(int(44100 * seconds)) / 44100
            tone = (0.2 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
            for start in range(0, len(tone), 1024):
                chunk = tone[start:start + 1024].reshape(1, -1)
                frame = av.AudioFrame.from_ndarray(chunk, format="flt", layout="mono")
                frame.sample_rate, frame.pts = 44100, start
                for packet in sound.encode(frame):
                    container.mux(packet)
            for packet in sound.encode():
                container.mux(packet)
    return path
