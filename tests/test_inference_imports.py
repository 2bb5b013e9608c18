"""Inference imports no tooling: a fusion through the library and a service app load nothing from optimisation,
evaluation or training code (checked in a fresh interpreter, whose sys.modules is the evidence)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
