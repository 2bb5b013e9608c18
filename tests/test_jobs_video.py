"""Video jobs over HTTP: a clip made here from a real photo (a pan, frames without a face, an AAC tone), fused by
a real server into an MP4 with every frame and the sound; a damaged clip fails with its code; cancel stops it."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import av
import httpx
import pytest
from job_helpers import make_clip, submit, wait_for
from serve_helpers import LiveServer
from test_serve_api import assert_error
from video_clips import audio_packets

from facefuse.config import StoreConfig
from facefuse.errors import ErrorCode


@pytest.fixture(scope="module")
def jobs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("video-jobs")


@pytest.fixture(scope="module")
def server(store_config: StoreConfig, jobs_dir: Path) -> Iterator[LiveServer]:
    with LiveServer(store_config, jobs_dir=jobs_dir) as live:
        yield live


@pytest.fixture(scope="module")
def clips(faces_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("clips")
    short = make_clip(folder / "short.mp4", faces_dir, frames=24, blank_frames=4)
    cut = folder / "cut.mp4"
    cut.write_bytes(short.read_bytes()[:6000])
    return {"short": short, "long": make_clip(folder / "long.mp4", faces_dir, frames=120, audio=False), "cut": cut}


def test_video_job_keeps_every_frame_and_the_sound(server, clips, faces_dir: Path, tmp_path: Path):
    answer = submit(server.url, faces_dir / "face_recognition/biden.jpg", [clips["short"]], every_n="5")
    assert answer.status_code == 202, answer.text
    job = answer.json()
    assert job["kind"] == "video" and job["items"] == []
    assert job["options"]["video"]["every_n"] == 5
    job = wait_for(server.url, job["id"])
    assert job["state"] == "done", job
    assert job["progress"]["frames_done"] == job["progress"]["frames_total"] == 24
    assert job["warnings"] == ["4 of 24 frames had no usable chosen face and were left as they are"]
    result = httpx.get(server.url + job["result_url"], timeout=60)
    assert result.status_code == 200 and result.headers["content-type"] == "video/mp4"
    assert result.headers["content-disposition"].startswith("inline")  # plays in the page
    with av.open(io.BytesIO(result.content)) as output:
        assert output.metadata.get("ai_generated") == "true"
        assert [s.type for s in output.streams] == ["video", "audio"]
        frames = list(output.decode(video=0))
        assert len(frames) == 24 and (frames[0].width, frames[0].height) == (480, 360)
    fused = tmp_path / "fused.mp4"
    fused.write_bytes(result.content)
    assert audio_packets(fused) == audio_packets(clips["short"])  # the sound is copied, not re-encoded
    assert server.metric("facefuse_job_frames_processed_total", kind="video") >= 24
    assert server.metric("facefuse_job_duration_seconds_count", kind="video", state="done") >= 1


def test_damaged_video_fails_with_its_code(server, clips, faces_dir: Path):
    job = submit(server.url, faces_dir / "face_recognition/biden.jpg", [clips["cut"]]).json()
    assert job["kind"] == "video"
    job = wait_for(server.url, job["id"])
    assert job["state"] == "failed" and job["error"]["code"] == "CORRUPT_VIDEO", job
    assert "path" not in job["error"]["details"] and "/in/" not in job["error"]["message"]  # no server paths
    assert_error(httpx.get(f"{server.url}/v1/jobs/{job['id']}/result"), ErrorCode.JOB_NOT_DONE)


def test_cancelling_a_running_video_job_removes_its_files(server, clips, faces_dir: Path, jobs_dir: Path):
    job = submit(server.url, faces_dir / "face_recognition/biden.jpg", [clips["long"]]).json()
    wait_for(server.url, job["id"], lambda j: j["progress"]["frames_done"] >= 2)
    assert httpx.delete(f"{server.url}/v1/jobs/{job['id']}").json()["state"] == "cancelled"
    stopped = wait_for(server.url, job["id"], lambda j: not (jobs_dir / job["id"]).exists())
    assert stopped["state"] == "cancelled" and stopped["progress"]["frames_done"] < 120
    assert_error(httpx.get(f"{server.url}/v1/jobs/{job['id']}/result"), ErrorCode.JOB_NOT_DONE)
    bad = submit(server.url, faces_dir / "face_recognition/biden.jpg", [clips["short"]], every_n="0")
    assert_error(bad, ErrorCode.INVALID_OPTION)
    assert_error(submit(server.url, faces_dir / "face_recognition/biden.jpg", [clips["short"]], start="nan"),
                 ErrorCode.INVALID_OPTION)
