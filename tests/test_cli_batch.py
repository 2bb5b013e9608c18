"""`facefuse batch` as a user runs it: a real process over real photos and folders."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import shutil
import struct
import subprocess
import sys
import termios
from pathlib import Path

from PIL import Image

from facefuse.imageio import read_label


def _batch(*args: str, store_config, **kwargs) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FACEFUSE_HOME": str(store_config.home), "FACEFUSE_MODEL_MIRROR": str(store_config.mirror)}
    return subprocess.run([sys.executable, "-m", "facefuse", "batch", *args], env=env, timeout=300, check=False,
                          text=True, **kwargs)


def test_batch_over_files_and_a_folder_reports_each_failure(store_config, faces_dir: Path, tmp_path: Path):
    rec = faces_dir / "face_recognition"
    folder = tmp_path / "album"
    (folder / "nested").mkdir(parents=True)
    shutil.copy(rec / "obama2.jpg", folder / "b.jpg")
    shutil.copy(rec / "obama_small.jpg", folder / "nested" / "c.jpg")
    (folder / "notes.txt").write_text("not a photo, and not picked from a folder")
    damaged = tmp_path / "damaged.jpg"
    damaged.write_bytes((rec / "obama-480p.jpg").read_bytes()[:20_000])
    out = tmp_path / "out"
    run = _batch("--source", str(rec / "obama.jpg"), "--targets", str(rec / "biden.jpg"), str(folder), str(damaged),
                 "--out-dir", str(out), "--output-format", "png", "--json", store_config=store_config, capture_output=True)
    assert run.returncode == 3, run.stderr  # a rejected photo: the input-rejected exit code
    summary = json.loads(run.stdout)
    assert [Path(d["output"]).name for d in summary["done"]] == ["0001-biden.png", "0002-b.png", "0003-c.png"]
    assert [(Path(f["target"]).name, f["error"]["code"]) for f in summary["failed"]] == [
        ("damaged.jpg", "CORRUPT_IMAGE")]
    assert sorted(p.name for p in out.iterdir()) == ["0001-biden.png", "0002-b.png", "0003-c.png"]
    for item in summary["done"]:
        data = Path(item["output"]).read_bytes()
        assert read_label(data)
        assert Image.open(item["output"]).size == Image.open(item["target"]).size


def test_batch_shows_a_progress_bar_in_a_terminal(store_config, faces_dir: Path, tmp_path: Path):
    rec = faces_dir / "face_recognition"
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a 100-column terminal
    try:
        run = _batch("--source", str(rec / "obama.jpg"), "--targets", str(rec / "obama2.jpg"),
                     str(rec / "obama_small.jpg"), "--out-dir", str(tmp_path), store_config=store_config,
                     stdout=subprocess.PIPE, stderr=follower)
        os.close(follower)
        follower = -1
        shown = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed: everything was read
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    assert run.returncode == 0
    text = shown.decode("utf-8", "replace")
    assert "fusing: 100%" in text and "2/2" in text and "photo/s" in text  # bar, count, rate (and ETA while running)
    assert run.stdout.strip() == f"wrote 2 of 2 photos to {tmp_path}"


def test_batch_with_a_missing_path_is_a_usage_error(store_config, faces_dir: Path, tmp_path: Path):
    run = _batch("--source", str(faces_dir / "face_recognition/obama.jpg"), "--targets", str(tmp_path / "nope"),
                 "--out-dir", str(tmp_path / "out"), store_config=store_config, capture_output=True)
    assert run.returncode == 2
    assert "no such file or folder" in run.stderr and "Traceback" not in run.stderr
