"""`facefuse serve` as users start it: a separate process, settings from flags and FACEFUSE_* variables."""

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

from facefuse.schema import flag_of
from facefuse.serve import ServeSettings


def _facefuse(*args: str, env: dict[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "facefuse", *args], check=False, capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, **(env or {})}, **kwargs)


def test_help_lists_every_setting_with_its_environment_variable():
    out = _facefuse("serve", "--help").stdout
    for name, info in ServeSettings.model_fields.items():
        assert flag_of(name, info) in out  # --name-with-dashes, or the field's own flag (--min-face)
        assert f"FACEFUSE_{name.upper()}" in out


def test_invalid_settings_are_usage_errors():
    bad_flag = _facefuse("serve", "--port", "99999")
    assert bad_flag.returncode == 2 and "--port" in bad_flag.stderr
    bad_env = _facefuse("serve", env={"FACEFUSE_MAX_BATCH": "many"})
    assert bad_env.returncode == 2 and "FACEFUSE_MAX_BATCH" in bad_env.stderr


def test_the_shells_give_opencvs_pool_one_fusions_share_of_the_cores():
    """Issue 19: OpenCV's pool sized like ONNX Runtime's sessions, cores ÷ concurrent fusions (at least one), by the
    shells that own their process (the server's workers, a video's fusion threads), in a child here: the setting is
    process-wide."""
    code = ("import cv2, sys; from facefuse.runtime import size_opencv_pool; "
            "size_opencv_pool(int(sys.argv[1])); print(cv2.getNumThreads())")
    cores = os.cpu_count() or 1
    for concurrent in (1, 2, 4):
        shown = subprocess.run([sys.executable, "-c", code, str(concurrent)], capture_output=True, text=True,
                               timeout=60, check=True).stdout.split()[-1]
        assert int(shown) == max(1, cores // concurrent), concurrent


def test_port_in_use_is_a_usage_error(store_config):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = {"FACEFUSE_HOME": str(store_config.home), "FACEFUSE_MODEL_MIRROR": str(store_config.mirror)}
        result = _facefuse("serve", "--port", str(port), env=env)
    assert result.returncode == 2
    assert f"could not listen on 127.0.0.1:{port}" in result.stderr and "Traceback" not in result.stderr


def test_serve_process_reads_flags_and_environment(store_config, faces_dir: Path):
    port = free_port()
    env = {**os.environ, "FACEFUSE_PORT": str(port), "FACEFUSE_API_KEY": "k3y", "FACEFUSE_MAX_BATCH": "3",
           "FACEFUSE_HOME": str(store_config.home), "FACEFUSE_MODEL_MIRROR": str(store_config.mirror)}
    process = subprocess.Popen([sys.executable, "-m", "facefuse", "serve", "--queue-size", "5"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        ready = httpx.get(url + "/readyz", timeout=5).json()
        assert ready["queue"]["size"] == 5  # from the flag
        image = {"image": ("a.jpg", (faces_dir / "face_recognition/obama.jpg").read_bytes())}
        assert httpx.post(url + "/v1/detect", files=image, timeout=60).status_code == 401  # key from the env
        answer = httpx.post(url + "/v1/detect", files=image, headers={"Authorization": "Bearer k3y"}, timeout=60)
        assert answer.status_code == 200
        assert 'facefuse_batch_size_bucket{le="3.0"}' in httpx.get(url + "/metrics", timeout=5).text
    finally:
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    assert "Traceback" not in output
