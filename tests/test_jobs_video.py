"""Video jobs over HTTP: a clip made here from a real photo (a pan, frames without a face, an AAC tone), fused by
a real server into an MP4 with every frame and the sound; a damaged clip is refused with its code; delete stops it;
limits on length and size are checked at admission."""

from __future__ import annotations

import io
import time
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
    return {"short": short, "long": make_clip(folder / "long.mp4", faces_dir, frames=120, audio=False), "cut": cut,
            "long_mkv": make_clip(folder / "long.mkv", faces_dir, frames=120, audio=False)}


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


def test_damaged_video_is_refused_at_admission(server, clips, faces_dir: Path, jobs_dir: Path):
    refused = submit(server.url, faces_dir / "face_recognition/biden.jpg", [clips["cut"]])
    error = assert_error(refused, ErrorCode.CORRUPT_VIDEO)  # its header cannot be read: nothing is stored
    assert "path" not in error["details"] and "/in/" not in error["message"]  # no server paths


def test_long_video_neither_starves_photo_jobs_nor_survives_its_delete(server, clips, faces_dir: Path,
                                                                       jobs_dir: Path, caplog):
    """Probe defects 6 and 5: a 7-minute video held the only job worker while a photo job waited behind it, and
    deleting a running video job logged FileNotFoundError and left files behind."""
    biden = faces_dir / "face_recognition/biden.jpg"
    video = submit(server.url, biden, [clips["long"]]).json()
    wait_for(server.url, video["id"], lambda j: j["progress"]["frames_done"] >= 2)
    photo = submit(server.url, biden, [faces_dir / "face_recognition/obama_small.jpg"]).json()
    assert wait_for(server.url, photo["id"])["state"] == "done"
    assert httpx.get(f"{server.url}/v1/jobs/{video['id']}").json()["state"] == "running"  # still, beside it

    deleted = httpx.delete(f"{server.url}/v1/jobs/{video['id']}").json()
    assert deleted["state"] == "deleted" and deleted["was"] == "running"
    assert_error(httpx.get(f"{server.url}/v1/jobs/{video['id']}"), ErrorCode.NOT_FOUND)
    for _ in range(600):  # its worker stops at the next frame and removes the folder
        if not (jobs_dir / video["id"]).exists():
            break
        time.sleep(0.05)
    assert not [path for path in jobs_dir.rglob("*") if video["id"] in str(path)]
    bad = [r.getMessage() for r in caplog.records if r.name.startswith("facefuse") and r.levelname == "ERROR"]
    assert not bad
    assert_error(submit(server.url, biden, [clips["short"]], every_n="0"), ErrorCode.INVALID_OPTION)
    assert_error(submit(server.url, biden, [clips["short"]], start="nan"), ErrorCode.INVALID_OPTION)
    assert_error(submit(server.url, biden, [clips["short"]], start="2", end="1"), ErrorCode.INVALID_OPTION)


def test_matroska_progress_comes_from_the_container_duration(server, clips, faces_dir: Path):
    """Probe defect 7: a Matroska/WebM stream has no frame count nor duration, so progress read 100 %, ETA 0 from
    the first second; the container knows the clip's length."""
    job = submit(server.url, faces_dir / "face_recognition/biden.jpg", [clips["long_mkv"]]).json()
    running = wait_for(server.url, job["id"], lambda j: j["progress"]["frames_done"] >= 2)
    progress = running["progress"]
    httpx.delete(f"{server.url}/v1/jobs/{job['id']}")
    assert running["state"] == "running" and 115 <= progress["frames_total"] <= 125  # 120 frames, ±5 %
    assert progress["percent"] < 50 and (progress["eta_s"] is None or progress["eta_s"] > 0)


@pytest.fixture(scope="module")
def limited(store_config: StoreConfig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with LiveServer(store_config, jobs_dir=tmp_path_factory.mktemp("limited-jobs"), job_max_video_s=3,
                    job_max_video_frames=40, job_max_video_mpx=0.1) as live:
        yield live


def test_video_limits_are_checked_at_admission(limited, clips, faces_dir: Path, tmp_path: Path):
    """Probe defect 6: a 30-minute 64×64 MKV and an 8192×8192 video were accepted. Duration (from the stream or,
    for Matroska, the container), frame count and frame size are now checked before anything is stored."""
    from video_clips import blank, write_clip

    biden = faces_dir / "face_recognition/biden.jpg"
    small = (160, 120)
    cases = {"long.mkv": ([blank(small)] * 40, 10, "max_video_s"),  # 4 s > 3 s; Matroska: the container's
             "many.mp4": ([blank(small)] * 50, 25, "max_video_frames"),  # 2 s, 50 frames > 40
             "wide.mp4": ([blank((480, 360))] * 5, 10, "max_video_pixels")}  # 0.17 MP > 0.1 MP
    for name, (frames, fps, limit) in cases.items():
        write_clip(tmp_path / name, frames, fps, audio=False)
        error = assert_error(submit(limited.url, biden, [tmp_path / name]), ErrorCode.JOB_TOO_LARGE)
        assert limit in error["details"], (name, error)
    write_clip(tmp_path / "fine.mkv", [blank(small)] * 20, 10, audio=False)  # 2 s, 20 frames, 0.02 MP
    fine = submit(limited.url, biden, [tmp_path / "fine.mkv"], end="100")
    assert fine.status_code == 202, fine.text
    assert fine.json()["options"]["video"]["end"] == 100
    unsized = submit(limited.url, biden, [("piped.mkv", _streamed_mkv([blank(small)] * 20, 10))], end="100")
    assert unsized.status_code == 202, unsized.text
    assert unsized.json()["options"]["video"]["end"] == 3  # a clip that hides its length still stops at 3 s
    for job in (fine, unsized):
        httpx.delete(f"{limited.url}/v1/jobs/{job.json()['id']}")


def _streamed_mkv(frames: list, fps: int) -> bytes:
    """Matroska written to a pipe, as a live encoder would: the muxer cannot seek back, so no duration is stored."""
    class Pipe(io.RawIOBase):
        def __init__(self) -> None:
            self.data = bytearray()

        def writable(self) -> bool:
            return True

        def seekable(self) -> bool:
            return False

        def write(self, data) -> int:  # type: ignore[override]
            self.data += data
            return len(data)

    pipe = Pipe()
    with av.open(pipe, "w", format="matroska") as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = frames[0].shape[1], frames[0].shape[0], "yuv420p"
        for i, pixels in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            frame.pts = i
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return bytes(pipe.data)
