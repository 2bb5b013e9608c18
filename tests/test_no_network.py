"""Nothing leaves this machine: the service runs in a network namespace whose only exit is a listening blackhole
proxy, and must not try to use it — while a client that honours the proxy variables does (the control). Without
``ORT_DISABLE_TELEMETRY`` (set by ``import facefuse``) ONNX Runtime's telemetry client was such a client here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = Path(__file__).with_name("netns_probe.py")


def test_no_outbound_connection_from_the_service(store_config, faces_dir):
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        pytest.fail("this test needs root with `unshare` and `ip` (util-linux, iproute2) to make a network "
                    "namespace", pytrace=False)
    model = next((store_config.home / "models").glob("blazeface_short.onnx"), None) or \
        next(store_config.mirror.rglob("*.onnx"))
    env = {**os.environ, "FACEFUSE_HOME": str(store_config.home), "FACEFUSE_OFFLINE": "1",
           "FACEFUSE_MODEL_MIRROR": str(store_config.mirror), "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.run(["unshare", "-n", sys.executable, str(PROBE), str(model),
                          str(faces_dir / "face_recognition/obama.jpg"), "30", "15"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["ready"] and report["faces"] == 1
    control = [s for s in report["seen"] if s["phase"] == "control"]
    assert control and control[0]["request"].startswith("CONNECT "), "the trap must catch a proxy-honouring client"
    assert [s for s in report["seen"] if s["phase"] == "facefuse"] == []
