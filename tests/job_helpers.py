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


def submit(url: str, source: Path | Sequence[Path], targets: Sequence[Path | tuple[str, bytes]], *,
           headers: dict[str, str] | None = None, **fields: str) -> httpx.Response:
    """``source``: one photo, or several of the source person (the field repeated)."""
    sources = [source] if isinstance(source, Path) else source
    files: list[tuple[str, tuple[str, bytes]]] = [("source", (path.name, path.read_bytes())) for path in sources]
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



def make_clip(path: Path, faces: Path, *, frames: int = 24, blank_frames: int = 0, fps: int = 10,
              audio: bool = True) -> Path:
    """A 480×360 H.264 clip (AAC tone when ``audio``) made by ``tests/video_clips.py`` from a shared photo: the
    camera pans across Obama's face, then ``blank_frames`` frames show no face."""
    from video_clips import OBAMA_720P, blank, camera, load, write_clip

    photo, size = load(faces / "face_recognition" / "obama-720p.jpg"), (480, 360)
    shots = [camera(photo, size, i / max(frames - blank_frames - 1, 1), OBAMA_720P, pan=0.3)
             for i in range(frames - blank_frames)]
    write_clip(path, shots + [blank(size) for _ in range(blank_frames)], fps, audio=audio)
    return path
