"""Inference imports no tooling: a fusion through the library, a service app and the ``facefuse fuse`` and
``facefuse detect`` commands load nothing from optimisation, evaluation or training code (checked in a fresh
interpreter, whose sys.modules is the evidence)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TOOLING = ("facefuse.optimize", "facefuse_eval", "facefuse_training", "training", "torch", "ray", "dlib",
           "onnxruntime.quantization", "onnxruntime.transformers", "skimage", "facefuse.cli")

SCRIPT = """
import json, sys
import facefuse
from facefuse.serve import ServeSettings, create_app
from facefuse.fusion.engine_table import ENGINES
create_app(ServeSettings())
result = facefuse.fuse(sys.argv[1], sys.argv[2], visible_label=False)
print(json.dumps({"faces": len(result.faces), "modules": sorted(sys.modules)}))
"""


def test_a_fusion_and_the_service_load_no_tooling(faces_dir: Path, store_config, monkeypatch):
    monkeypatch.setenv("FACEFUSE_HOME", str(store_config.home))
    monkeypatch.setenv("FACEFUSE_MODEL_MIRROR", str(store_config.mirror))
    run = subprocess.run([sys.executable, "-c", SCRIPT, str(faces_dir / "face_recognition/biden.jpg"),
                          str(faces_dir / "face_recognition/obama-480p.jpg")], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["faces"] == 1
    loaded = [m for m in report["modules"] if m.startswith(TOOLING)]
    assert loaded == [], f"inference imported tooling: {loaded}"
    assert "facefuse.fusion.swappers" in report["modules"]  # the check saw the whole engine table


CLI_SCRIPT = """
import json, sys
from facefuse.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def _cli_modules(args: list[str], store_config) -> list[str]:
    env = {**os.environ, "FACEFUSE_HOME": str(store_config.home), "FACEFUSE_MODEL_MIRROR": str(store_config.mirror)}
    run = subprocess.run([sys.executable, "-c", CLI_SCRIPT, *args], capture_output=True, text=True, timeout=300,
                         env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["code"] == 0, run.stdout[-2000:]
    return report["modules"]


@pytest.mark.parametrize("command", ["fuse", "detect"])
def test_the_fuse_and_detect_commands_load_no_tooling(command, faces_dir: Path, store_config, tmp_path):
    """The CLI imports each command's module only when it runs: before, ``facefuse fuse`` imported every
    command and so ``facefuse.optimize`` and ``onnxruntime.quantization``."""
    rec = faces_dir / "face_recognition"
    args = (["fuse", "--source", str(rec / "biden.jpg"), "--target", str(rec / "obama-480p.jpg"), "--output",
             str(tmp_path / "out.jpg")] if command == "fuse" else ["detect", str(rec / "obama-480p.jpg")])
    modules = _cli_modules(args, store_config)
    tooling = tuple(m for m in TOOLING if m != "facefuse.cli")
    assert [m for m in modules if m.startswith(tooling)] == []
    others = {f"facefuse.cli.{name}_cmd" for name in ("optimize", "train", "serve", "gpu", "models", "batch", "video")}
    assert not others & set(modules)  # only the command that ran was imported
    assert f"facefuse.cli.{command}_cmd" in modules
