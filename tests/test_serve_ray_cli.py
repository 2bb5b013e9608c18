"""`facefuse serve --backend ray` as users start it: its own one-machine Ray, the API on the port it was given, and a
clean stop on SIGTERM (what systemd and Kubernetes send) that takes Ray's processes with it.

A module of its own so that it runs after ``test_serve_ray.py`` has shut its Ray down (two Rays on two cores would
only slow both).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from serve_helpers import free_port

from facefuse.config import StoreConfig


def _children(pid: int) -> set[int]:
    """Direct children of ``pid`` (Ray's GCS server and raylet, which own every other Ray process)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(stat.parent.name))
        except (OSError, ValueError):
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_serve_backend_ray_answers_and_stops_cleanly(store_config: StoreConfig, faces_dir: Path, tmp_path: Path):
    port = free_port()
    env = {**os.environ, "FACEFUSE_HOME": str(store_config.home), "FACEFUSE_MODEL_MIRROR": str(store_config.mirror)}
    log = (tmp_path / "serve.log").open("wb")
    process = subprocess.Popen([sys.executable, "-m", "facefuse", "serve", "--backend", "ray", "--port", str(port),
                                "--num-cpus-per-replica", "0.5", "--log-level", "warning"],
                               stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + 180
        while time.monotonic() < end and process.poll() is None:
            try:
                if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        assert process.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
        ready = httpx.get(url + "/readyz", timeout=10).json()
        assert ready["backend"] == "ray" and set(ready["deployments"]) == {"Analysis", "Fusion"}
        photo = (faces_dir / "face_recognition/obama.jpg").read_bytes()
        found = httpx.post(url + "/v1/detect", files={"image": ("o.jpg", photo)}, timeout=60)
        assert found.status_code == 200 and len(found.json()["faces"]) == 1
        ray_processes = _children(process.pid)
        assert ray_processes  # the GCS server and the raylet this command started
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=120)
    assert code == 0, (tmp_path / "serve.log").read_text()[-3000:]
    end = time.monotonic() + 30
    while time.monotonic() < end and any(_alive(pid) for pid in ray_processes):
        time.sleep(0.5)
    assert not [pid for pid in ray_processes if _alive(pid)]
    assert "Traceback" not in (tmp_path / "serve.log").read_text()


def test_serve_backend_ray_on_a_port_in_use_is_a_usage_error(store_config: StoreConfig):
    """As with the single-process server: a clear usage error and exit code 2, not Ray's wrapped traceback from its
    HTTP proxy actor (what it printed before: "error: INTERNAL: unexpected RayTaskError(RuntimeError) …")."""
    env = {**os.environ, "FACEFUSE_HOME": str(store_config.home), "FACEFUSE_MODEL_MIRROR": str(store_config.mirror)}
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "facefuse", "serve", "--backend", "ray", "--port", str(port),
                                 "--num-cpus-per-replica", "0.5", "--log-level", "warning"],
                                capture_output=True, text=True, env=env, timeout=240, check=False)
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"could not listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr and "RayTaskError" not in result.stderr
