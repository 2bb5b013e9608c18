"""A server killed with ``kill -9`` in the middle of a job resumes it when started again on the same folder.

The service runs as a real ``facefuse serve`` process (a thread could not be killed like that). Between the kill
and the restart the job's database and folder are read directly, to see exactly what the dead process left.
"""

from __future__ import annotations

import io
import json
import time
import zipfile
from pathlib import Path
from typing import Any

import av
import httpx
from job_helpers import FINISHED, make_clip, submit, wait_for
from PIL import Image
from serve_helpers import rss_mb, serve_process

from facefuse.imageio import read_label
from facefuse.jobs import JobState, JobStore
from facefuse.video.fuse import CHECKPOINT


def test_job_killed_mid_run_resumes_on_restart(store_config, faces_dir: Path, tmp_path: Path):
    rec = faces_dir / "face_recognition"
    targets = [rec / "obama-480p.jpg", rec / "obama2.jpg", rec / "biden.jpg", rec / "obama_small.jpg"] * 5
    with serve_process(store_config, tmp_path) as (process, url):
        job_id = submit(url, rec / "obama.jpg", targets).json()["id"]
        wait_for(url, job_id, lambda j: j["progress"]["frames_done"] >= 2)
        process.kill()  # SIGKILL: no shutdown handler runs
        process.wait(timeout=30)

    store = JobStore(tmp_path, retention_s=3600)
    left = store.get(job_id)
    assert left is not None and left.state is JobState.RUNNING
    before = {item.index: item.finished for item in store.items(job_id) if item.state == "done"}
    assert 2 <= len(before) < len(targets), "the job must have been killed part-way"
    assert not (tmp_path / job_id / "result.zip").exists()
    store.close()

    with serve_process(store_config, tmp_path) as (_, url):
        job = wait_for(url, job_id)
        assert job["state"] == "done", job
        assert job["progress"]["frames_done"] == len(targets) and job["errors"] == []
        result = httpx.get(url + job["result_url"], timeout=60)
        assert result.status_code == 200

    archive = zipfile.ZipFile(io.BytesIO(result.content))
    assert archive.testzip() is None  # every member's CRC checks: nothing truncated
    assert len(archive.namelist()) == len(targets)
    for name, target in zip(archive.namelist(), targets):
        data = archive.read(name)
        assert read_label(data) and Image.open(io.BytesIO(data)).size == Image.open(target).size
    store = JobStore(tmp_path, retention_s=3600)
    after = {item.index: item.finished for item in store.items(job_id)}
    assert all(after[index] == finished for index, finished in before.items())  # finished items were not redone
    assert not list((tmp_path / job_id).rglob(".part-*"))  # what the killed process was writing is gone
    store.close()


def test_video_job_killed_mid_run_continues_from_its_last_segment(store_config, faces_dir: Path, tmp_path: Path):
    clip = make_clip(tmp_path / "clip.mp4", faces_dir, frames=60, fps=10)
    jobs_dir = tmp_path / "jobs"
    with serve_process(store_config, jobs_dir) as (process, url):
        job_id = submit(url, faces_dir / "face_recognition/biden.jpg", [clip]).json()["id"]
        # past the first 2 s segment, and that segment on disk: frames_done counts frames handed to the encoder,
        # whose thread finishes a segment's file a few frames later (on a loaded machine, later still)
        wait_for(url, job_id, lambda j: j["progress"]["frames_done"] >= 25 and _segments_saved(jobs_dir / job_id))
        process.kill()
        process.wait(timeout=30)
    assert not (jobs_dir / job_id / "result.mp4").exists()

    with serve_process(store_config, jobs_dir) as (_, url):
        job = wait_for(url, job_id)
        assert job["state"] == "done", job
        resumed = [w for w in job["warnings"] if w.startswith("resumed from frame")]
        assert resumed and int(resumed[0].split()[3]) >= 20, job["warnings"]  # finished segments were kept
        result = httpx.get(url + job["result_url"], timeout=60)
    with av.open(io.BytesIO(result.content)) as output:
        assert sum(1 for _ in output.decode(video=0)) == 60  # whole, not truncated, no frame twice


def test_a_finished_video_job_gives_its_working_memory_back(store_config, faces_dir: Path, tmp_path: Path):
    """The service keeps freed blocks for the next frame (facefuse.allocator); when a job ends its worker hands the
    free pages back (release_freed_memory), so a service left idle after a video does not hold the video's working
    memory. Measured on the real `facefuse serve` process: its RSS while the job runs (the most sampled), then once
    it is done."""
    from video_clips import OBAMA_720P, camera, load, write_clip

    rec = faces_dir / "face_recognition"
    clip = tmp_path / "portrait.mp4"
    write_clip(clip, [camera(load(rec / "obama-720p.jpg"), (1280, 720), i / 119, OBAMA_720P, pan=0.1, zoom=0.15)
                      for i in range(120)], fps=30, audio=False)
    with serve_process(store_config, tmp_path / "jobs") as (process, url):
        job_id = submit(url, rec / "biden.jpg", [clip]).json()["id"]
        busy: list[float] = []  # sampled while the job runs: frames in flight, the freed ones kept for the next

        def sample(job: dict[str, Any]) -> bool:
            if job["state"] == "running":
                busy.append(rss_mb(process.pid))
            return job["state"] in FINISHED

        job = wait_for(url, job_id, sample, timeout_s=600)
        assert job["state"] == "done", job
        time.sleep(1.0)  # the worker's bookkeeping after the state change
        idle = rss_mb(process.pid)
    assert len(busy) >= 5, busy  # the job was seen running
    assert idle < max(busy) - 60, (max(busy), idle)  # without the hand-back: within ~1 MB (128 MB with it)


def _segments_saved(job_folder: Path) -> int:
    """How many finished segments a video job's checkpoint records (0 before it has written one)."""
    saved = 0
    for checkpoint in job_folder.rglob(CHECKPOINT):
        try:
            saved += len(json.loads(checkpoint.read_text())["segments"])
        except (OSError, ValueError, KeyError):
            pass  # written atomically, but it may not be there yet
    return saved
